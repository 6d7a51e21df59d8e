// Lattice kernels (docs/models.md#lattice): the exact C = 1 recurrence and approximation (17) token by token with
// the chunk-start anchor (the reference of the chunk form, chunk.cpp). The shared gates and preparation are gates.h.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/lattice/gates.h"
#include "runtime/lattice/lattice.h"

namespace mnemo {

LatticeResult lattice_exact(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const torch::Tensor& S_init,
                            bool dec) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  using lattice_detail::check_inputs, lattice_detail::prepare, lattice_detail::slot_norm;
  check_inputs(q, k, v, gamma, mu, S_init);
  auto p = prepare(q, k, v, gamma, mu);
  auto S = S_init.to(p.dt);
  const int64_t T = q.size(1);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto kt = p.k.select(2, t).unsqueeze(-1), qt = p.q.select(2, t).unsqueeze(-1);  // [B, H, m, 1]
    auto vt = p.v.select(2, t).unsqueeze(2);                                        // [B, H, 1, d]
    auto ga = p.ga.select(2, t).unsqueeze(-1).unsqueeze(-1), m = p.mu.select(2, t).unsqueeze(-1).unsqueeze(-1);
    auto n = slot_norm(S).unsqueeze(-1);                                   // [B, H, m, 1]
    auto phi = S / n;                                                      // φ_i = S_i / n_i
    auto h = dec ? (kt * phi).sum(2, true) - vt : -vt;                     // [B, H, 1, d]
    auto kap = kt / n;                                                     // κ_i
    auto delta = kap * (h - phi * (phi * h).sum(-1, true));                // κ_i P(S_i) h
    auto U = m * S - ga * delta;
    auto beta = n * torch::rsqrt(m * m * n * n + ga * ga * (delta * delta).sum(-1, true) + 1e-12);
    S = beta * U;                                                          // each slot keeps its norm
    ys.push_back((qt * S).sum(2));                                         // y = Σ_i q_i S_i  [B, H, d]
  }
  auto y = T ? torch::stack(ys, 1) : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options().dtype(p.dt));
  return {y.to(v.scalar_type()), {S, S, 0}};
}

LatticeResult lattice_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st,
                                int64_t chunk, bool dec) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  using lattice_detail::anchor_gates, lattice_detail::check_inputs, lattice_detail::prepare,
      lattice_detail::renormalise;
  check_inputs(q, k, v, gamma, mu, st.S);
  if (chunk < 1 || st.pos < 0 || st.pos >= chunk)
    throw Error("lattice: need chunk >= 1 and 0 <= pos < chunk, got chunk " + std::to_string(chunk) + ", pos " +
                std::to_string(st.pos));
  auto p = prepare(q, k, v, gamma, mu);
  auto S = st.S.to(p.dt), S0 = (st.pos == 0 ? st.S : st.S0).to(p.dt);
  int64_t pos = st.pos;
  const int64_t T = q.size(1);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto gt = anchor_gates(S0, p.k.narrow(2, t, 1), p.v.narrow(2, t, 1), p.ga.narrow(2, t, 1), p.mu.narrow(2, t, 1),
                           dec);
    // S_τ = diag(g_τ) S_{τ-1} + w_τ h_τ^T   (approximation (17))
    S = gt.g.squeeze(2).unsqueeze(-1) * S + gt.w.squeeze(2).unsqueeze(-1) * gt.h;
    ys.push_back(torch::matmul(p.q.narrow(2, t, 1), S).squeeze(2));  // y = S^T q
    if (++pos == chunk) {
      S = renormalise(S, S0);
      S0 = S;
      pos = 0;
    }
  }
  auto y = T ? torch::stack(ys, 1) : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options().dtype(p.dt));
  return {y.to(v.scalar_type()), {S, S0, pos}};
}

}  // namespace mnemo
