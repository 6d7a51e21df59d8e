// ATLAS / ATLAS++ kernels (spec models.md §7.7): the Omega objective optimised by Muon with weight decay,
//   u_t = Σ_{i ∈ win(t)} γ_i ∇ℓ_i(M^0),  S_t = θ_t S_{t-1} + u_t,  M_t = α_t M_{t-1} - η_t NS_k(S_t),
// and Newton–Schulz-k (§2.9). The chunk form materialises per-token weights (NS breaks the rank-1 structure).
#include "runtime/atlas/omega.h"
#include "core/common.h"

namespace mnemo {

using namespace atlas_detail;

torch::Tensor newton_schulz(const torch::Tensor& G, int64_t steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  std::vector<int64_t> dims = {-2, -1};
  auto X = G / (torch::linalg_vector_norm(G, 2, torch::IntArrayRef(dims), true, c10::nullopt) + 1e-7);
  const bool tr = G.size(-2) > G.size(-1);
  if (tr) X = X.transpose(-1, -2);
  for (int64_t i = 0; i < steps; ++i) {
    auto A = torch::matmul(X, X.transpose(-1, -2));
    auto Bm = b * A + c * torch::matmul(A, A);
    X = a * X + torch::matmul(Bm, X);
  }
  return tr ? X.transpose(-1, -2) : X;
}

OmegaResult atlas_muon_chunk(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                             const OmegaState& init) {
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  for (int64_t pos = 0; pos < T;) {
    const int64_t n = std::min(T - pos, b - off);
    auto K = torch::cat({p.bk, bh(p.in.k, pos, n)}, 2), KF = torch::cat({p.bkf, bh(p.in.kf, pos, n)}, 2);
    auto V = torch::cat({p.bv, bh(p.in.v, pos, n)}, 2), G = torch::cat({p.bg, bh(p.in.gamma, pos, n)}, 2);
    auto terms = window_terms(spec, opt, p.anchor, K, KF, V);
    auto Gm = band_mask(n, c, K.options()) * G.unsqueeze(-2);  // [B, H, n, N]: M_s[t, i] γ_i
    // Step 2 coefficients: S_t = Θ_{s..t} S^b + Σ_{j<=t} Θ_{j+1..t} u_j.
    auto mom = momentum_chunk_coefficients(bh(p.in.log_theta, pos, n), {}, torch::ones_like(Gm.select(-1, 0))).dual;
    // Step 4 coefficients: M_t = A_t M^b - Σ_{j<=t} L[t, j] η_j O_j.
    auto la = p.in.log_alpha.defined() ? bh(p.in.log_alpha, pos, n) : torch::Tensor();
    auto dec = momentum_chunk_coefficients(la, {}, bh(p.in.eta, pos, n)).dual;
    auto e2 = [](const torch::Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); };
    MemoryWeights W_all;
    for (size_t l = 0; l < p.w.size(); ++l) {
      // Step 1: u_t = Σ_i M_s[t, i] γ_i col_i row_i^T, [B, H, n, out, in]
      auto U = torch::matmul((Gm.unsqueeze(-1) * terms.cols[l].unsqueeze(2)).transpose(-1, -2),
                             terms.rows[l].unsqueeze(2));
      auto shp = U.sizes().vec();
      auto flat = [&](const torch::Tensor& x) { return x.reshape({shp[0], shp[1], n, shp[3] * shp[4]}); };
      auto S = e2(mom.A) * p.s[l].unsqueeze(2) + torch::matmul(mom.C, flat(U)).view(shp);
      auto O = newton_schulz(S, opt.ns_steps);  // step 3, batched over tokens
      auto W = e2(dec.A) * p.w[l].unsqueeze(2) - torch::matmul(dec.C, flat(O)).view(shp);
      W_all.push_back(W);
      p.s[l] = S.select(2, n - 1);
      p.w[l] = W.select(2, n - 1);
    }
    // Step 5: y_t = M_t(φ(q_t)) with the materialised per-token weights.
    auto qc = bh(p.in.q, pos, n).unsqueeze(-2), qfc = bh(p.in.qf, pos, n).unsqueeze(-2);  // [B, H, n, 1, d]
    ys.push_back(memory_apply(spec, W_all, qc, {}, qfc).squeeze(-2));
    roll_buffers(p, c, K, KF, V, G);
    off += n;
    if (off == b) {
      off = 0;
      p.anchor = p.w;
    }
    pos += n;
  }
  return finish(p, ys, in, off);
}

OmegaResult atlas_muon_recurrent(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                                 const OmegaState& init) {
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto K = torch::cat({p.bk, bh(p.in.k, t, 1)}, 2), KF = torch::cat({p.bkf, bh(p.in.kf, t, 1)}, 2);
    auto V = torch::cat({p.bv, bh(p.in.v, t, 1)}, 2), G = torch::cat({p.bg, bh(p.in.gamma, t, 1)}, 2);
    auto u = weighted_outer_sum(window_terms(spec, opt, p.anchor, K, KF, V), G);
    auto e = [&](const torch::Tensor& x) { return x.select(1, t).unsqueeze(-1).unsqueeze(-1); };  // [B, H, 1, 1]
    for (size_t l = 0; l < p.w.size(); ++l) {
      p.s[l] = e(p.in.log_theta).exp() * p.s[l] + u[l];
      auto w = p.in.log_alpha.defined() ? e(p.in.log_alpha).exp() * p.w[l] : p.w[l];
      p.w[l] = w - e(p.in.eta) * newton_schulz(p.s[l], opt.ns_steps);
    }
    ys.push_back(memory_apply(spec, p.w, bh(p.in.q, t, 1), {}, bh(p.in.qf, t, 1)));
    roll_buffers(p, c, K, KF, V, G);
    if (++off == b) {
      off = 0;
      p.anchor = p.w;
    }
  }
  return finish(p, ys, in, off);
}

}  // namespace mnemo
