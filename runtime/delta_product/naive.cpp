// Token-by-token Gated DeltaProduct (docs/models.md#gated-deltaproduct) and the input checks shared with the chunked
// form.
#include <vector>

#include "core/common.h"
#include "runtime/delta_product/delta_product.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_delta_product_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state,
                                int64_t num_householder) {
  const std::string op = "gated_delta_product";
  if (num_householder < 1)
    throw Error(op + ": num_householder must be >= 1, got " + std::to_string(num_householder));
  if (!q.defined() || !k.defined() || !v.defined() || !beta.defined())
    throw Error(op + ": q, k, v and beta are required");
  if (q.dim() != 4) throw Error(op + ": q must be [B, T, H, K], got " + c10::str(q.sizes()));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), Tn = T * num_householder;
  check_shape(op, "k", k, {B, Tn, H, K});
  check_shape(op, "v", v, {B, Tn, H, -1});
  check_shape(op, "beta", beta, {B, Tn, H});
  if (g.defined()) check_shape(op, "g", g, {B, T, H});
  if (initial_state.defined()) check_shape(op, "initial_state", initial_state, {B, H, K, v.size(3)});
}

DeltaRuleResult gated_delta_product_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& beta, const torch::Tensor& g,
                                              const torch::Tensor& initial_state, double scale,
                                              int64_t num_householder) {
  check_delta_product_inputs(q, k, v, beta, g, initial_state, num_householder);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qc = q.to(dt) * scale, kc = k.to(dt), vc = v.to(dt), bc = beta.to(dt);
  auto decay = g.defined() ? g.to(dt).exp() : torch::Tensor();
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, q.options().dtype(dt));
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    if (decay.defined()) S = S * decay.select(1, t).unsqueeze(-1).unsqueeze(-1);  // S ← e^{g_t} S
    for (int64_t j = 0; j < num_householder; ++j) {
      const int64_t row = t * num_householder + j;
      auto k_r = kc.select(1, row);                                         // [B, H, K]
      auto kS = torch::matmul(k_r.unsqueeze(-2), S).squeeze(-2);            // k S [B, H, V]
      auto u = bc.select(1, row).unsqueeze(-1) * (vc.select(1, row) - kS);  // β (v − k S)
      S = S + k_r.unsqueeze(-1) * u.unsqueeze(-2);                          // S + kᵀ u
    }
    outs.push_back(torch::matmul(qc.select(1, t).unsqueeze(-2), S).squeeze(-2));  // q_t S after the last step
  }
  auto o = T > 0 ? torch::stack(outs, 1) : torch::zeros({B, 0, H, V}, q.options().dtype(dt));
  return {o.to(v.scalar_type()), S};
}

}  // namespace mnemo
