// Token-by-token RWKV-7 recurrence (docs/models.md#rwkv-7; arXiv 2503.14456 §4) and the input checks shared with the
// chunk form.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/rwkv7/rwkv7.h"

namespace mnemo {

void check_rwkv7_inputs(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k,
                        const torch::Tensor& v, const torch::Tensor& a, const torch::Tensor& b,
                        const torch::Tensor& initial_state) {
  if (!r.defined() || !w.defined() || !k.defined() || !v.defined() || !a.defined() || !b.defined())
    throw Error("rwkv7: r, w, k, v, a and b are required");
  if (r.dim() != 4) throw Error("rwkv7: r must be [B, T, H, K], got " + c10::str(r.sizes()));
  const int64_t B = r.size(0), T = r.size(1), H = r.size(2), K = r.size(3);
  check_shape("rwkv7", "w", w, {B, T, H, K});
  check_shape("rwkv7", "k", k, {B, T, H, K});
  check_shape("rwkv7", "v", v, {B, T, H, -1});
  check_shape("rwkv7", "a", a, {B, T, H, K});
  check_shape("rwkv7", "b", b, {B, T, H, K});
  if (initial_state.defined()) check_shape("rwkv7", "initial_state", initial_state, {B, H, K, v.size(3)});
}

Rwkv7Result rwkv7_recurrent(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k,
                            const torch::Tensor& v, const torch::Tensor& a, const torch::Tensor& b,
                            const torch::Tensor& initial_state, double scale) {
  check_rwkv7_inputs(r, w, k, v, a, b, initial_state);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({r, w, k, v, a, b, initial_state});
  const int64_t B = r.size(0), T = r.size(1), H = r.size(2), K = r.size(3), V = v.size(3);
  auto rc = r.to(dt) * scale, kc = k.to(dt), vc = v.to(dt), ac = a.to(dt), bc = b.to(dt);
  auto decay = w.to(dt).exp();  // [B, T, H, K]
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, r.options().dtype(dt));
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto removed = torch::matmul(ac.select(1, t).unsqueeze(-2), S);               // a_t S_{t-1}  [B, H, 1, V]
    S = S * decay.select(1, t).unsqueeze(-1) + bc.select(1, t).unsqueeze(-1) * removed +
        kc.select(1, t).unsqueeze(-1) * vc.select(1, t).unsqueeze(-2);             // D_t S + b_tᵀ (a_t S) + k_tᵀ v_t
    outs.push_back(torch::matmul(rc.select(1, t).unsqueeze(-2), S).squeeze(-2));  // r_t S_t
  }
  auto o = T > 0 ? torch::stack(outs, 1) : torch::zeros({B, 0, H, V}, r.options().dtype(dt));
  return {o.to(v.scalar_type()), S};
}

}  // namespace mnemo
