// Lattice kernels (docs/models.md#lattice): the exact C = 1 recurrence, approximation (17) token
// by token with the chunk-start anchor, and (17) in parallel inside each chunk.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/lattice/lattice.h"

namespace mnemo {

namespace {

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                  const torch::Tensor& mu, const torch::Tensor& S) {
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.dim() != 4 || v.size(1) != q.size(1) || gamma.dim() != 3 ||
      mu.sizes() != gamma.sizes() || S.dim() != 4 || S.size(2) != q.size(3) || S.size(3) != v.size(3))
    throw Error("lattice: expected q, k [B,T,H,m], v [B,T,H,d], gamma, mu [B,T,H], S [B,H,m,d]; got q " +
                c10::str(q.sizes()) + ", v " + c10::str(v.sizes()) + ", gamma " + c10::str(gamma.sizes()) +
                ", S " + c10::str(S.sizes()));
}

torch::Tensor slot_norm(const torch::Tensor& S) { return (S * S).sum(-1).sqrt(); }  // [B, H, m]

// Gates of approximation (17) for a segment of L tokens from the anchor S0 (docs/models.md#lattice, corrections docs/models.md#lattice.1–2).
// Inputs in [B, H, L, *] layout; returns h [B,H,L,d], g and w [B,H,L,m].
struct Gates {
  torch::Tensor h, g, w;
};
Gates anchor_gates(const torch::Tensor& S0, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& ga,
                   const torch::Tensor& mu, bool dec) {
  auto n = slot_norm(S0).unsqueeze(2);                           // [B, H, 1, m]
  auto h = dec ? torch::matmul(k / n, S0) - v : -v;              // h = φ(S0)^T k - v  |  -v
  auto hh = torch::matmul(h, S0.transpose(-1, -2)) / (n * n);    // ĥ_i = s_i·h / n_i²
  auto kap = k / n;                                              // κ_i = k_i / n_i
  auto hsq = (h * h).sum(-1, true);                              // ||h||²
  auto dsq = (kap * kap * (hsq - n * n * hh * hh)).clamp_min(0);  // ||Δ_i||² (docs/models.md#lattice.2)
  auto ga_ = ga.unsqueeze(-1), mu_ = mu.unsqueeze(-1);
  auto beta = n * torch::rsqrt(mu_ * mu_ * n * n + ga_ * ga_ * dsq + 1e-12);  // docs/models.md#lattice.1: μ² n²
  return {h, beta * (mu_ + ga_ * hh * kap), -beta * ga_ * kap};
}

// Rescale every slot of S to the norm of the matching slot of S0 (chunk-end decision, docs/models.md#lattice).
torch::Tensor renormalise(const torch::Tensor& S, const torch::Tensor& S0) {
  return S * (slot_norm(S0) / slot_norm(S)).unsqueeze(-1);
}

struct Prepared {
  torch::Tensor q, k, v, ga, mu;  // [B, H, T, *] / [B, H, T]
  torch::ScalarType dt;
};
Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                 const torch::Tensor& mu) {
  const auto dt = recurrence_dtype(v);
  return {q.to(dt).transpose(1, 2), k.to(dt).transpose(1, 2), v.to(dt).transpose(1, 2),
          gamma.to(dt).transpose(1, 2), mu.to(dt).transpose(1, 2), dt};
}

}  // namespace

LatticeResult lattice_exact(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const torch::Tensor& S_init,
                            bool dec) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
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

LatticeResult lattice_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st,
                            int64_t chunk, bool dec) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  check_inputs(q, k, v, gamma, mu, st.S);
  if (chunk < 1 || st.pos < 0 || st.pos >= chunk)
    throw Error("lattice: need chunk >= 1 and 0 <= pos < chunk, got chunk " + std::to_string(chunk) + ", pos " +
                std::to_string(st.pos));
  auto p = prepare(q, k, v, gamma, mu);
  auto S = st.S.to(p.dt), S0 = (st.pos == 0 ? st.S : st.S0).to(p.dt);
  int64_t pos = st.pos;
  const int64_t T = q.size(1);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T;) {
    const int64_t L = std::min(chunk - pos, T - t);
    auto qc = p.q.narrow(2, t, L);
    auto gt = anchor_gates(S0, p.k.narrow(2, t, L), p.v.narrow(2, t, L), p.ga.narrow(2, t, L), p.mu.narrow(2, t, L),
                           dec);
    // Ω[τ, j] = Π_{l=j+1}^{τ} g_l by an explicit cumulative product (gates may be <= 0: no log space, docs/models.md#numerical-stability).
    auto opts = torch::TensorOptions().dtype(torch::kBool).device(q.device());
    auto strict = torch::tril(torch::ones({L, L}, opts), -1).unsqueeze(-1);  // τ > j
    auto causal = torch::tril(torch::ones({L, L}, opts)).unsqueeze(-1);      // τ >= j
    auto G = torch::where(strict, gt.g.unsqueeze(3), torch::ones({}, gt.g.options()));  // [B, H, L, L, m]
    auto Omega = torch::cumprod(G, 2).masked_fill(causal.logical_not(), 0);
    auto P = gt.g.narrow(2, 0, 1) * Omega.select(3, 0);  // Π_{l=0}^{τ} g_l  [B, H, L, m]
    auto A = (Omega * qc.unsqueeze(3) * gt.w.unsqueeze(2)).sum(-1);  // A[τ, j] = Σ_i q_τi Ω_τji w_ji
    ys.push_back(torch::matmul(qc * P, S) + torch::matmul(A, gt.h));
    auto wl = Omega.select(2, L - 1) * gt.w;  // [B, H, L(j), m]
    S = P.select(2, L - 1).unsqueeze(-1) * S + torch::matmul(wl.transpose(-1, -2), gt.h);
    t += L;
    pos += L;
    if (pos == chunk) {
      S = renormalise(S, S0);
      S0 = S;
      pos = 0;
    }
  }
  auto y = T ? torch::cat(ys, 2).transpose(1, 2)
             : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options().dtype(p.dt));
  return {y.to(v.scalar_type()), {S, S0, pos}};
}

}  // namespace mnemo
