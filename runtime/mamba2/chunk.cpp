// Chunked Mamba-2 SSD in the form of mamba_ssm's ssd_minimal_discrete (docs/models.md#mamba2, docs/models.md#numerical-stability rule 3).
#include <limits>

#include "runtime/mamba2/mamba2.h"
#include "runtime/kernels/precision.h"

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
  return mamba2_ssd_chunk_grouped(x, dt, A, B, C, initial_state, chunk_size);
}

GroupedSsdShape check_grouped_ssd_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                                         const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                                         const torch::Tensor& initial_state, int64_t states) {
  check_shape(op, "x", x, {-1, -1, -1, -1});
  const int64_t Bn = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3);
  check_shape(op, "dt", dt, {Bn, T, H});
  check_shape(op, "A", A, {H});
  check_shape(op, "B", B, {Bn, T, -1, -1});
  const int64_t G = B.size(2), N = B.size(3);
  if (G < 1 || H % G != 0)
    throw Error(std::string(op) + ": heads (" + std::to_string(H) + ") must be a multiple of the B/C groups (" +
                std::to_string(G) + ")");
  check_shape(op, "C", C, {Bn, T, G, N});
  if (initial_state.defined()) check_shape(op, "initial_state", initial_state, {states, H, P, N});
  return {Bn, T, H, P, G, N};
}

RecurrentResult mamba2_ssd_chunk_grouped(const torch::Tensor& x, const torch::Tensor& dt,
                                         const torch::Tensor& A, const torch::Tensor& B,
                                         const torch::Tensor& C, const torch::Tensor& initial_state,
                                         int64_t chunk_size) {
  const char* op = "mamba2_ssd_chunk";
  const GroupedSsdShape shape = check_grouped_ssd_inputs(op, x, dt, A, B, C, initial_state, x.size(0));
  const int64_t Bn = shape.B, T = shape.T, H = shape.H, P = shape.P, G = shape.G, N = shape.N;
  check_chunking(op, T, chunk_size);
  const int64_t hpg = H / G;  // heads per group
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  const int64_t L = std::min(chunk_size, T);
  auto dtf = dt.to(ct);
  auto Xt = x.to(ct) * dtf.unsqueeze(-1);                                 // [B, T, H, P]
  auto Xg = to_chunks(Xt.reshape({Bn, T, G, hpg * P}), L);                   // [B, G, n, L, hpg·P]
  auto a = to_chunks(A.to(ct).view({1, 1, H}) * dtf, L);                 // [B, H, n, L]
  auto Bc = to_chunks(B.to(ct), L), Cc = to_chunks(C.to(ct), L);         // [B, G, n, L, N]
  const int64_t n_chunks = a.size(2);
  auto a_cum = torch::cumsum(a, -1);
  auto a_last = a_cum.narrow(-1, L - 1, 1);                               // [B, H, n, 1]
  // Per-head [B, H, n, L] -> [B, G, n, L, hpg, 1], to scale the rows of a group's head block.
  auto per_group_rows = [&](const torch::Tensor& t) {
    return t.view({Bn, G, hpg, n_chunks, L}).permute({0, 1, 3, 4, 2}).unsqueeze(-1);
  };

  // Y = Y_diag + Y_off in the group layout [B, G, n, L, hpg, P]: Y_diag from (C Bᵀ ⊙ L_h) X_h inside
  // each chunk, L_ij = e^{a_cum_i − a_cum_j} (i >= j); Y_off_i = e^{a_cum_i} C_i Hsᵀ from the state at
  // the chunk start. chunk_states: each chunk's own contribution to the state at its end,
  // Σ_j e^{a_C − a_j} X_jᵀ B_j, for all heads of a group in one matmul: [hpg·P, L] @ [L, N].
  auto CB = chunk_matmul(Cc, Bc.transpose(-1, -2));  // [B, G, n, L, L], once per group
  auto row_scale = per_group_rows(a_cum.exp());       // e^{a_cum_i} <= 1, [B, G, n, L, hpg, 1]
  torch::Tensor Y_diag, chunk_states;  // Y_diag still without e^{a_cum_i} when factorised
  const bool factorised = decay_factorisable(a_cum);
  if (factorised) {
    // L_ij = e^{a_cum_i} e^{−a_cum_j} (chunking.h): rows of X scaled by e^{−a_cum_j}, one matmul per
    // group with tril(C Bᵀ) for all its heads; e^{a_cum_i} is applied with Y_off's row scale below.
    auto Xs = (Xg.view({Bn, G, n_chunks, L, hpg, P}) * per_group_rows((-a_cum).exp()))
                  .view({Bn, G, n_chunks, L, hpg * P});
    Y_diag = chunk_matmul(tril_fresh(CB), Xs).view({Bn, G, n_chunks, L, hpg, P});
    chunk_states = chunk_matmul(Xs.transpose(-1, -2), Bc).view({Bn, G, n_chunks, hpg, P, N}) *
                   a_last.exp().view({Bn, G, hpg, n_chunks, 1, 1}).transpose(2, 3);
  } else {
    // L from differences clamped to <= 0 (docs/models.md#numerical-stability rule 3): every exp is finite and the upper triangle is
    // zeroed after exp, the values of segsum's masked exp.
    auto diff = (a_cum.unsqueeze(-1) - a_cum.unsqueeze(-2)).clamp_max(0.0);
    auto decay_matrix = tril_fresh(recording_grad() ? diff.exp() : diff.exp_());  // [B, H, n, L, L]
    auto M = CB.unsqueeze(2) * decay_matrix.view({Bn, G, hpg, n_chunks, L, L});
    Y_diag = chunk_matmul(M.view({Bn, H, n_chunks, L, L}), to_chunks(Xt, L))  // [B, H, n, L, P]
                 .view({Bn, G, hpg, n_chunks, L, P})
                 .permute({0, 1, 3, 4, 2, 5});
    auto decay_to_end = per_group_rows((a_last - a_cum).clamp_max(0.0).exp());  // [B, G, n, L, hpg, 1]
    auto Xd = (Xg.view({Bn, G, n_chunks, L, hpg, P}) * decay_to_end).view({Bn, G, n_chunks, L, hpg * P});
    chunk_states = chunk_matmul(Xd.transpose(-1, -2), Bc).view({Bn, G, n_chunks, hpg, P, N});
  }
  // Inter-chunk recurrence on the states; starts[:, :, c] = state before chunk c.
  auto chunk_decay = a_last.exp().view({Bn, G, hpg, n_chunks, 1, 1});
  auto Hs = initial_state.defined() ? initial_state.to(ct) : torch::zeros({Bn, H, P, N}, Xg.options());
  auto Hs_g = Hs.view({Bn, G, hpg, P, N});
  std::vector<torch::Tensor> starts;
  starts.reserve(n_chunks);
  // unbind, not select(n) in the loop: the backward of N selects writes N full-size zero tensors (O(N²) traffic,
  // most of a 340M Gated DeltaNet step on the GPU by the profiler), unbind's stacks the N gradients once.
  const auto decay_c = chunk_decay.unbind(3), states_c = chunk_states.unbind(2);
  for (int64_t c = 0; c < n_chunks; ++c) {
    starts.push_back(Hs_g);
    Hs_g = decay_c[c] * Hs_g + states_c[c];
  }
  // Y_off before its row scale: C_t Hsᵀ, one matmul per group over its heads ([L, N] @ [N, hpg·P]).
  auto S = torch::stack(starts, 2).view({Bn, G, n_chunks, hpg * P, N});
  auto Y = chunk_matmul(Cc, S.transpose(-1, -2)).view({Bn, G, n_chunks, L, hpg, P});
  if (factorised) Y.add_(Y_diag);
  Y = recording_grad() ? Y * row_scale : Y.mul_(row_scale);
  if (!factorised) Y = Y + Y_diag;
  auto y = Y.permute({0, 2, 3, 1, 4, 5}).reshape({Bn, n_chunks * L, H, P}).narrow(1, 0, T);
  return {y.to(x.scalar_type()), Hs_g.reshape({Bn, H, P, N})};
}

}  // namespace mnemo
