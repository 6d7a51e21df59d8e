// Chunk-wise RWKV-7 (docs/models.md#rwkv-7, docs/models.md#numerical-stability): a WY/UT form of the diagonal-plus-
// low-rank recurrence. Per chunk of C rows with R (scaled), K, V, A, B, S the state before the chunk, γ_i = Σ_{s<=i} w_s
// ∈ R^K the inclusive in-chunk cumulative log decay and γ⁻_i = γ_i − w_i the exclusive one, unrolling
//   S_i = Diag(e^{γ_i}) S + Σ_{j<=i} Diag(e^{γ_i − γ_j}) (b_jᵀ u_j + k_jᵀ v_j),   u_i = a_i S_{i-1} ∈ R^V
// gives u_i = (a_i ⊙ e^{γ⁻_i}) S + Σ_{j<i} M^{ab}_ij u_j + Σ_{j<i} M^{ak}_ij v_j with
//   M^{xy}_ij = Σ_c x_ic y_jc e^{γ⁻_ic − γ_jc}   (j < i),
// so with the unit lower-triangular L = I − M^{ab}:
//   Ū = L^{-1} M^{ak} V,  W = L^{-1} (A ⊙ e^{γ⁻}),  U = Ū + W S
//   O = (R ⊙ e^{γ}) S + P^{rb} U + P^{rk} V,   P^{xy}_ij = Σ_c x_ic y_jc e^{γ_ic − γ_jc}   (j <= i)
//   S ← Diag(e^{γ_C}) S + (B ⊙ e^{γ_C − γ})ᵀ U + (K ⊙ e^{γ_C − γ})ᵀ V
// With a = −β k ⊙ e^{w} and b = k this is the KDA chunk form (runtime/kda/chunk.cpp). The score matrices are
// factorised products e^{γ_i} e^{−γ_j} when the chunk's decay span allows it, else built by
// per_channel_decayed_scores (every exponent <= 0); M^{ak}, M^{ab} there as the inclusive scores of the rows of A
// moved up by one (row i−1 then carries a_i against γ_{i−1} = γ⁻_i), moved back down.
#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/rwkv7/rwkv7.h"

namespace mnemo {

namespace {

// x [.., C, D] -> rows 1..C-1 of x then a zero row; and the inverse move (a zero row then rows 0..C-2).
torch::Tensor rwkv7_rows_up(const torch::Tensor& x) {
  const int64_t C = x.size(-2);
  return torch::cat({x.narrow(-2, 1, C - 1), torch::zeros_like(x.narrow(-2, 0, 1))}, -2);
}
torch::Tensor rwkv7_rows_down(const torch::Tensor& x) {
  const int64_t C = x.size(-2);
  return torch::cat({torch::zeros_like(x.narrow(-2, 0, 1)), x.narrow(-2, 0, C - 1)}, -2);
}

}  // namespace

Rwkv7Result rwkv7_chunk(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& initial_state,
                        double scale, int64_t chunk_size, int64_t sub_chunk) {
  check_rwkv7_inputs(r, w, k, v, a, b, initial_state);
  if (chunk_size < 1) throw Error("rwkv7: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  if (sub_chunk < 1) throw Error("rwkv7: sub_chunk must be >= 1, got " + std::to_string(sub_chunk));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({r, w, k, v, a, b, initial_state});
  const int64_t Bsz = r.size(0), T = r.size(1), H = r.size(2), K = r.size(3), V = v.size(3);
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({Bsz, H, K, V}, r.options().dtype(dt));
  if (T == 0) return {torch::zeros({Bsz, 0, H, V}, v.options()), S};

  const int64_t C = std::min(chunk_size, T);
  auto R = to_chunks(r.to(dt) * scale, C);  // [Bsz, H, N, C, K]
  auto Kc = to_chunks(k.to(dt), C);         // [Bsz, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);         // [Bsz, H, N, C, V]
  auto Ac = to_chunks(a.to(dt), C);
  auto Bc = to_chunks(b.to(dt), C);
  auto wc = to_chunks(w.to(dt), C);
  auto gamma = wc.cumsum(-2);          // γ, <= 0
  auto gamma_ex = gamma - wc;          // γ⁻
  auto gamma_last = gamma.narrow(-2, C - 1, 1);  // [Bsz, H, N, 1, K]

  auto R_in = R * gamma.exp();        // R ⊙ e^{γ}
  auto A_in = Ac * gamma_ex.exp();    // A ⊙ e^{γ⁻}
  torch::Tensor P_rk, P_rb, M_ak, M_ab;
  if (decay_factorisable(gamma)) {
    // e^{γ_ic − γ_jc} = e^{γ_ic} e^{−γ_jc} (chunking.h): each score matrix is one matmul, masked after it.
    auto grow = (-gamma).exp();
    auto K_gt = (Kc * grow).transpose(-1, -2), B_gt = (Bc * grow).transpose(-1, -2);
    auto RA = torch::cat({R_in, A_in}, -2);  // [.., 2C, K]
    auto s_k = chunk_matmul(RA, K_gt), s_b = chunk_matmul(RA, B_gt);
    P_rk = s_k.narrow(-2, 0, C).tril();
    P_rb = s_b.narrow(-2, 0, C).tril();
    M_ak = s_k.narrow(-2, C, C).tril(-1);
    M_ab = s_b.narrow(-2, C, C).tril(-1);
  } else {
    P_rk = per_channel_decayed_scores(R, Kc, gamma, sub_chunk);
    P_rb = per_channel_decayed_scores(R, Bc, gamma, sub_chunk);
    auto A_up = rwkv7_rows_up(Ac);
    M_ak = rwkv7_rows_down(per_channel_decayed_scores(A_up, Kc, gamma, sub_chunk));
    M_ab = rwkv7_rows_down(per_channel_decayed_scores(A_up, Bc, gamma, sub_chunk));
  }

  // Ū and W in one unit-triangular solve L X = [M^{ak} V, A ⊙ e^{γ⁻}], posed as the right-side solve Xᵀ Lᵀ = (..)ᵀ;
  // the strict part −M^{ab} is passed with unitriangular = true (the diagonal is taken as 1).
  auto rhs = torch::cat({chunk_matmul(M_ak, Vc), A_in}, -1);  // [Bsz, H, N, C, V + K]
  auto solved = torch::linalg_solve_triangular((-M_ab).transpose(-1, -2), rhs.transpose(-1, -2), /*upper=*/true,
                                               /*left=*/false, /*unitriangular=*/true)
                    .transpose(-1, -2);
  auto U_bar = solved.narrow(-1, 0, V), W = solved.narrow(-1, V, K);
  auto out_decay = (gamma_last - gamma).clamp_max(0.0).exp();  // e^{γ_C − γ}
  auto B_out = Bc * out_decay;
  auto O_values = chunk_matmul(P_rk, Vc);                                 // P^{rk} V
  auto S_values = chunk_matmul((Kc * out_decay).transpose(-1, -2), Vc);  // (K ⊙ e^{γ_C − γ})ᵀ V [.., K, V]
  auto chunk_decay = gamma_last.exp().transpose(-1, -2);                  // [Bsz, H, N, K, 1]

  // The sequential part: U_n = Ū_n + W_n S_n and S_{n+1} = Diag(e^{γ_C}) S_n + B_outᵀ U_n + (K ⊙ e^{γ_C − γ})ᵀ V
  // (chunking.h chunk_delta_state_scan with −W: one kernel a pass on a GPU), then every chunk's output at once.
  auto pass = chunk_delta_state_scan(-W, U_bar, B_out, chunk_decay, S_values, S);
  auto o = chunk_matmul(P_rb, pass.corrected) + O_values + chunk_matmul(R_in, pass.starts);  // [Bsz, H, N, C, V]
  return {from_chunks(o, T).to(v.scalar_type()), pass.final_state};
}

}  // namespace mnemo
