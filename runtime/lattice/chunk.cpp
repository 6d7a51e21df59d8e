// Lattice kernels (docs/models.md#lattice): approximation (17) in parallel inside each chunk. The token-by-token
// forms are naive.cpp; the shared gates and preparation gates.h.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/lattice/gates.h"
#include "runtime/lattice/lattice.h"

namespace mnemo {

LatticeResult lattice_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st,
                            int64_t chunk, bool dec) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  using lattice_detail::anchor_gates, lattice_detail::check_inputs, lattice_detail::prepare,
      lattice_detail::renormalise;
  check_inputs(q, k, v, gamma, mu, st.S);
  if (chunk < 1 || st.pos < 0 || st.pos >= chunk)
    throw Error("lattice: need chunk >= 1 and 0 <= pos < chunk, got chunk " + std::to_string(chunk) + ", pos " +
                std::to_string(st.pos));
  if (lattice_scan_eligible(q)) return lattice_scan(q, k, v, gamma, mu, st, chunk, dec);
  auto p = prepare(q, k, v, gamma, mu);
  auto S = st.S.to(p.dt), S0 = (st.pos == 0 ? st.S : st.S0).to(p.dt);
  int64_t pos = st.pos;
  const int64_t T = q.size(1);
  std::vector<torch::Tensor> ys;
  // The pieces up to each chunk boundary, cut by one split per input: a slice per piece would add a zero-filled
  // gradient of the whole input per piece in the backward (O(T²/chunk) work).
  std::vector<int64_t> lengths;
  for (int64_t t = 0, at = pos; t < T;) {
    lengths.push_back(std::min(chunk - at, T - t));
    t += lengths.back();
    at = (at + lengths.back()) % chunk;
  }
  auto pieces = [&](const torch::Tensor& x) {
    return lengths.empty() ? std::vector<torch::Tensor>{} : x.split_with_sizes(lengths, 2);
  };
  const auto q_pieces = pieces(p.q), k_pieces = pieces(p.k), v_pieces = pieces(p.v), ga_pieces = pieces(p.ga),
             mu_pieces = pieces(p.mu);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t L = lengths[i];
    const auto& qc = q_pieces[i];
    auto gt = anchor_gates(S0, k_pieces[i], v_pieces[i], ga_pieces[i], mu_pieces[i], dec);
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
