// Token-by-token MesaNet (docs/models.md#mesanet), the conjugate-gradient solver shared with the chunk form, and the
// input checks of both forms.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/mesa_net/mesa_net.h"

namespace mnemo {

void check_mesa_net_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                           const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps) {
  if (!q.defined() || !k.defined() || !v.defined() || !g.defined() || !beta.defined() || !lambda.defined())
    throw Error("mesa_net: q, k, v, g, beta and lambda are required");
  if (q.dim() != 4) throw Error("mesa_net: q must be [B, T, H, K], got " + c10::str(q.sizes()));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape("mesa_net", "k", k, {B, T, H, K});
  check_shape("mesa_net", "v", v, {B, T, H, -1});
  check_shape("mesa_net", "g", g, {B, T, H});
  check_shape("mesa_net", "beta", beta, {B, T, H});
  check_shape("mesa_net", "lambda", lambda, {H, K});
  if (h_kk0.defined()) check_shape("mesa_net", "h_kk", h_kk0, {B, H, K, K});
  if (h_kv0.defined()) check_shape("mesa_net", "h_kv", h_kv0, {B, H, K, v.size(3)});
  if (cg_steps < 1) throw Error("mesa_net: cg_steps must be >= 1, got " + std::to_string(cg_steps));
}

torch::Tensor mesa_net_conjugate_gradient(const std::function<torch::Tensor(const torch::Tensor&)>& apply_a,
                                          const torch::Tensor& rhs, int64_t steps) {
  constexpr double kEps = 1e-5;  // added to both denominators: a converged solve (δ → 0) takes no further step
  auto x = torch::zeros_like(rhs);
  auto r = rhs;  // residual rhs − A x at x = 0
  auto p = r;
  auto delta = (r * r).sum(-1, /*keepdim=*/true);
  for (int64_t i = 0; i < steps; ++i) {
    auto Ap = apply_a(p);
    auto alpha = delta / ((p * Ap).sum(-1, true) + kEps);
    x = x + alpha * p;
    r = r - alpha * Ap;
    auto delta_new = (r * r).sum(-1, true);
    p = r + (delta_new / (delta + kEps)) * p;
    delta = delta_new;
  }
  return x;
}

MesaNetResult mesa_net_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                                 const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps) {
  check_mesa_net_inputs(q, k, v, g, beta, lambda, h_kk0, h_kv0, cg_steps);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, g, beta, lambda, h_kk0, h_kv0});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const auto opts = q.options().dtype(dt);
  auto kc = k.to(dt), vc = v.to(dt);
  auto kb = kc * beta.to(dt).unsqueeze(-1);  // β_t k_t
  auto decay = g.to(dt).exp();               // [B, T, H]
  auto Hk = h_kk0.defined() ? h_kk0.to(dt) : torch::zeros({B, H, K, K}, opts);
  auto Gv = h_kv0.defined() ? h_kv0.to(dt) : torch::zeros({B, H, K, V}, opts);
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), Hk, Gv};
  std::vector<torch::Tensor> hk_all, gv_all;
  hk_all.reserve(T);
  gv_all.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto gamma = decay.select(1, t).unsqueeze(-1).unsqueeze(-1);  // [B, H, 1, 1]
    auto kb_t = kb.select(1, t).unsqueeze(-1);                     // β_t k_tᵀ [B, H, K, 1]
    Hk = gamma * Hk + kb_t * kc.select(1, t).unsqueeze(-2);        // H_t
    Gv = gamma * Gv + kb_t * vc.select(1, t).unsqueeze(-2);        // G_t
    hk_all.push_back(Hk);
    gv_all.push_back(Gv);
  }
  auto Hs = torch::stack(hk_all, 1), Gs = torch::stack(gv_all, 1);  // [B, T, H, K, K], [B, T, H, K, V]
  auto lam = lambda.to(dt);                                          // [H, K]
  auto apply = [&](const torch::Tensor& p) {                         // (H_t + Diag(λ)) p_t; H_t symmetric
    return torch::matmul(p.unsqueeze(-2), Hs).squeeze(-2) + lam * p;
  };
  auto x = mesa_net_conjugate_gradient(apply, q.to(dt), cg_steps);  // [B, T, H, K]
  auto o = torch::matmul(x.unsqueeze(-2), Gs).squeeze(-2);           // x_t G_t
  return {o.to(v.scalar_type()), Hk, Gv};
}

}  // namespace mnemo
