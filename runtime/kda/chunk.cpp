// Chunk-wise Kimi Delta Attention (docs/models.md#kda, docs/models.md#numerical-stability). Per chunk of C rows with
// Q (scaled), K, V, S the state before the chunk and b_i = Σ_{r<=i} g_r ∈ R^K the inclusive in-chunk cumulative log
// decay, unrolling the recurrence gives
//   k_i S'_i = (k_i ⊙ e^{b_i}) S + Σ_{j<i} A_ij u_j,   A_ij = Σ_c k_ic k_jc e^{b_ic − b_jc}
// so u_i = β_i v_i − β_i (k_i ⊙ e^{b_i}) S − β_i Σ_{j<i} A_ij u_j, i.e. with L = I + stril(diag(β) A):
//   U = L^{-1} diag(β) V,  W = L^{-1} diag(β) (K ⊙ e^{b}),  U' = U − W S
//   O = (Q ⊙ e^{b}) S + tril(P) U',   P_ij = Σ_c q_ic k_jc e^{b_ic − b_jc}
//   S ← Diag(e^{b_C}) S + (K ⊙ e^{b_C − b})ᵀ U'
// This is the Gated DeltaNet chunk form (runtime/delta_rule/chunk.cpp) with the scalar in-chunk decay Γ_ij replaced by
// a per-channel one inside the products. A and P are factorised products when the chunk's decay span allows it
// (docs/models.md#numerical-stability), else built by per_channel_decayed_scores (every exponent <= 0).
#include "core/common.h"
#include "runtime/kda/kda.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

KdaResult kda_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& beta,
                    const torch::Tensor& g, const torch::Tensor& initial_state, double scale, int64_t chunk_size,
                    int64_t sub_chunk) {
  check_kda_inputs(q, k, v, beta, g, initial_state);
  if (chunk_size < 1) throw Error("kda: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  if (sub_chunk < 1) throw Error("kda: sub_chunk must be >= 1, got " + std::to_string(sub_chunk));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, q.options().dtype(dt));
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), S};

  const int64_t C = std::min(chunk_size, T);
  auto Q = to_chunks(q.to(dt) * scale, C);                // [B, H, N, C, K]
  auto Kc = to_chunks(k.to(dt), C);                       // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);                       // [B, H, N, C, V]
  auto beta_c = to_chunks(beta.to(dt), C).unsqueeze(-1);  // [B, H, N, C, 1]
  auto b = to_chunks(g.to(dt), C).cumsum(-2);             // [B, H, N, C, K], <= 0
  auto b_last = b.narrow(-2, C - 1, 1);                   // [B, H, N, 1, K]
  auto eb = b.exp();

  auto Q_in = Q * eb, K_in = Kc * eb;  // Q ⊙ e^{b}, K ⊙ e^{b}
  torch::Tensor A, P;
  if (decay_factorisable(b)) {
    // e^{b_ic − b_jc} = e^{b_ic} e^{−b_jc} (chunking.h): A and P are one matmul each against K ⊙ e^{−b}, with no
    // [C, C, K] tensor (at T 2048 the sub-chunk form held 2.7x Gated DeltaNet's training memory).
    auto k_grown_t = (Kc * (-b).exp()).transpose(-1, -2);
    A = chunk_matmul(K_in, k_grown_t);
    P = tril_fresh(chunk_matmul(Q_in, k_grown_t));
  } else {
    A = per_channel_decayed_scores(Kc, Kc, b, sub_chunk);
    P = per_channel_decayed_scores(Q, Kc, b, sub_chunk);
  }
  auto L = A.tril(-1) * beta_c;                                 // stril(diag(β) A)
  auto K_out = Kc * (b_last - b).clamp_max(0.0).exp();          // K ⊙ e^{b_C − b}
  auto chunk_decay = b_last.exp().transpose(-1, -2);            // [B, H, N, K, 1]

  // U and W in one unit-triangular solve, posed as the right-side solve Xᵀ Lᵀ = Rᵀ (see delta_rule/chunk.cpp).
  auto rhs = torch::cat({Vc * beta_c, K_in * beta_c}, -1);  // [B, H, N, C, V + K]
  auto solved = torch::linalg_solve_triangular(L.transpose(-1, -2), rhs.transpose(-1, -2), /*upper=*/true,
                                               /*left=*/false, /*unitriangular=*/true)
                    .transpose(-1, -2);
  auto U = solved.narrow(-1, 0, V), W = solved.narrow(-1, V, K);
  // The sequential part: X_n = U'_n = U_n − W_n S_n and S_{n+1} = Diag(e^{b_C}) S_n + K_outᵀ U'_n (chunking.h
  // chunk_delta_state_scan: one kernel a pass on a GPU), then every chunk's output at once.
  auto pass = chunk_delta_state_scan(W, U, K_out, chunk_decay, {}, S);
  auto o = chunk_matmul(P, pass.corrected) + chunk_matmul(Q_in, pass.starts);  // [B, H, N, C, V]
  return {from_chunks(o, T).to(v.scalar_type()), pass.final_state};
}

}  // namespace mnemo
