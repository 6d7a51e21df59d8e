// Chunked Mamba-2 SSD in the form of mamba_ssm's ssd_minimal_discrete (spec §4.5, §12 rule 3).
#include <limits>

#include "runtime/mamba2/mamba2.h"

namespace mnemo {

torch::Tensor ssd_segsum(const torch::Tensor& a) {
  const int64_t C = a.size(-1);
  const auto dev = a.device();
  // rep[.., i, j] = a_i, kept for j < i, then a cumulative sum down i: Σ_{j < r <= i} a_r.
  auto shape = a.sizes().vec();
  shape.push_back(C);
  auto x = a.unsqueeze(-1).expand(shape);
  x = x.masked_fill(causal_mask(C, dev, /*strict=*/true).logical_not(), 0.0);
  auto seg = torch::cumsum(x, -2);
  return seg.masked_fill(causal_mask(C, dev).logical_not(), -std::numeric_limits<double>::infinity());
}

RecurrentResult mamba2_ssd_chunk(const torch::Tensor& x, const torch::Tensor& dt,
                                 const torch::Tensor& A, const torch::Tensor& B,
                                 const torch::Tensor& C, const torch::Tensor& initial_state,
                                 int64_t chunk_size) {
  check_mamba2_inputs("mamba2_ssd_chunk", x, dt, A, B, C, initial_state);
  check_chunking("mamba2_ssd_chunk", x.size(1), chunk_size);
  const auto ct = recurrence_dtype(x);
  const int64_t Bn = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = B.size(3);
  const int64_t L = std::min(chunk_size, T);
  auto dtf = dt.to(ct);
  auto X = to_chunks(x.to(ct) * dtf.unsqueeze(-1), L);                  // [B, H, n, L, P]
  auto a = to_chunks(A.to(ct).view({1, 1, H}) * dtf, L);                 // [B, H, n, L]
  auto Bc = to_chunks(B.to(ct), L), Cc = to_chunks(C.to(ct), L);         // [B, H, n, L, N]
  const int64_t n_chunks = a.size(2);
  auto a_cum = torch::cumsum(a, -1);
  auto a_last = a_cum.narrow(-1, L - 1, 1);                               // [B, H, n, 1]

  // 1. Diagonal blocks (outputs from inside the chunk).
  auto decay_matrix = ssd_segsum(a).exp();                                // [B, H, n, L, L]
  auto Y_diag = torch::matmul(torch::matmul(Cc, Bc.transpose(-1, -2)) * decay_matrix, X);
  // 2. Each chunk's own contribution to the state at its end: Σ_j e^{a_C − a_j} X_jᵀ B_j.
  auto decay_to_end = (a_last - a_cum).clamp_max(0.0).exp().unsqueeze(-1);  // [B, H, n, L, 1]
  auto chunk_states = torch::matmul((X * decay_to_end).transpose(-1, -2), Bc);  // [B, H, n, P, N]
  // 3. Inter-chunk recurrence on the states.
  auto chunk_decay = a_last.exp().unsqueeze(-1);                          // [B, H, n, 1, 1]
  auto Hs = initial_state.defined() ? initial_state.to(ct) : torch::zeros({Bn, H, P, N}, X.options());
  std::vector<torch::Tensor> starts;
  starts.reserve(n_chunks);
  for (int64_t c = 0; c < n_chunks; ++c) {
    starts.push_back(Hs);
    Hs = chunk_decay.select(2, c) * Hs + chunk_states.select(2, c);
  }
  // 4. Outputs from the state at each chunk start: y_t = e^{a_cum,t} Hs C_tᵀ.
  auto C_decayed = Cc * a_cum.exp().unsqueeze(-1);
  auto Y_off = torch::matmul(C_decayed, torch::stack(starts, 2).transpose(-1, -2));  // [B, H, n, L, P]
  return {from_chunks(Y_diag + Y_off, T).to(x.scalar_type()), Hs};
}

}  // namespace mnemo
