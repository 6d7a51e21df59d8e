// Token-by-token Kimi Delta Attention (docs/models.md#kda) and the input checks shared with the chunk form.
#include <vector>

#include "core/common.h"
#include "runtime/kda/kda.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_kda_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state) {
  if (!q.defined() || !k.defined() || !v.defined() || !beta.defined() || !g.defined())
    throw Error("kda: q, k, v, beta and g are required");
  if (q.dim() != 4) throw Error("kda: q must be [B, T, H, K], got " + c10::str(q.sizes()));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape("kda", "k", k, {B, T, H, K});
  check_shape("kda", "v", v, {B, T, H, -1});
  check_shape("kda", "beta", beta, {B, T, H});
  check_shape("kda", "g", g, {B, T, H, K});
  if (initial_state.defined()) check_shape("kda", "initial_state", initial_state, {B, H, K, v.size(3)});
}

KdaResult kda_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state,
                        double scale) {
  check_kda_inputs(q, k, v, beta, g, initial_state);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qc = q.to(dt) * scale, kc = k.to(dt), vc = v.to(dt), bc = beta.to(dt);
  auto decay = g.to(dt).exp();  // [B, T, H, K]
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, q.options().dtype(dt));
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    S = S * decay.select(1, t).unsqueeze(-1);                                     // S' = Diag(e^{g_t}) S
    auto k_t = kc.select(1, t);                                                   // [B, H, K]
    auto kS = torch::matmul(k_t.unsqueeze(-2), S).squeeze(-2);                    // k_t S' [B, H, V]
    auto u = bc.select(1, t).unsqueeze(-1) * (vc.select(1, t) - kS);              // u_t
    S = S + k_t.unsqueeze(-1) * u.unsqueeze(-2);                                  // S' + k_t^T u_t
    outs.push_back(torch::matmul(qc.select(1, t).unsqueeze(-2), S).squeeze(-2));  // q_t S_t
  }
  auto o = T > 0 ? torch::stack(outs, 1) : torch::zeros({B, 0, H, V}, q.options().dtype(dt));
  return {o.to(v.scalar_type()), S};
}

}  // namespace mnemo
