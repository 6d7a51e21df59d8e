// Chunk-wise (WY / UT transform) delta rule and gated delta rule (docs/models.md#deltanet, docs/models.md#gated-deltanet, docs/models.md#numerical-stability).
// Per chunk of C rows Q (already scaled), K, V, with S the state before the chunk and
// b_i = Σ_{r<=i} g_r (inclusive cumulative log decay within the chunk, 0 for DeltaNet):
//   Γ_ij = exp(b_i - b_j) for i >= j, 0 above the diagonal (masked before exp)
//   L = I + stril( diag(β) (K K^T) ⊙ Γ )                    unit lower triangular
//   U = L^{-1} diag(β) V,  W = L^{-1} diag(β e^{b}) K        (one triangular solve)
//   U' = U - W S
//   O  = (Q ⊙ e^{b}) S + tril( (Q K^T) ⊙ Γ ) U'
//   S  ← e^{b_C} S + (K ⊙ e^{b_C - b})^T U'
// Derivation: unrolling the recurrence inside a chunk gives u_i = β_i v_i - β_i e^{b_i} k_i S
// - β_i Σ_{j<i} Γ_ij (k_i·k_j) u_j, i.e. L u = diag(β) V - diag(β e^b) K S.
#include <limits>
#include <utility>
#include <vector>

#include "core/common.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/precision.h"
#include "runtime/kernels/chunking.h"

namespace mnemo {

namespace {

// U = L^{-1} diag(β) V and W = L^{-1} diag(β e^b) K from the strictly lower L (its zero diagonal is not read:
// unitriangular = true) in one solve, posed as the right-side solve Xᵀ Lᵀ = Rᵀ: the transposed row-major stacks are
// already in LAPACK's column-major layout, so nothing is copied (3.3× faster on CPU than the left-side solve for 128
// chunks of 64 × 64).
std::pair<torch::Tensor, torch::Tensor> wy_solve(const torch::Tensor& L, const torch::Tensor& beta_v,
                                                 const torch::Tensor& beta_k) {
  const auto rhs = torch::cat({beta_v, beta_k}, -1);  // [..., C, V + K]
  const auto solved = torch::linalg_solve_triangular(L.transpose(-1, -2), rhs.transpose(-1, -2), /*upper=*/true,
                                                     /*left=*/false, /*unitriangular=*/true)
                          .transpose(-1, -2);
  const int64_t V = beta_v.size(-1), K = beta_k.size(-1);
  return {solved.narrow(-1, 0, V), solved.narrow(-1, V, K)};
}

}  // namespace

DeltaRuleResult delta_rule_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& beta, const torch::Tensor& g,
                                 const torch::Tensor& initial_state, double scale, int64_t chunk_size) {
  check_delta_rule_inputs(q, k, v, beta, g, initial_state);
  if (chunk_size < 1) throw Error("delta rule: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype({q, k, v, beta, g, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const auto opts = q.options().dtype(dt);
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, opts);
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), S};

  const int64_t C = std::min(chunk_size, T);
  const int64_t N = (T + C - 1) / C;
  auto Q = to_chunks(q.to(dt) * scale, C);  // [B, H, N, C, K]
  auto Kc = to_chunks(k.to(dt), C);         // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);         // [B, H, N, C, V]
  auto beta_c = to_chunks(beta.to(dt), C).unsqueeze(-1);  // [B, H, N, C, 1]

  auto Kb = Kc * beta_c;  // diag(β) K
  torch::Tensor L, rhs_k, P, Q_in, K_out, chunk_decay;
  if (g.defined()) {
    auto b = to_chunks(g.to(dt), C).cumsum(-1);  // [B, H, N, C]
    auto eb = b.exp().unsqueeze(-1);              // [B, H, N, C, 1], <= 1
    auto b_last = b.narrow(-1, C - 1, 1);         // [B, H, N, 1]
    chunk_decay = b_last.exp().unsqueeze(-1);     // e^{b_C}, [B, H, N, 1, 1]
    rhs_k = Kb * eb;
    Q_in = Q * eb;
    if (decay_factorisable(b)) {
      // Γ_ij = e^{b_i} e^{−b_j} (chunking.h): L and P are products of the decayed rows with K ⊙ e^{−b},
      // no [C, C] exponent.
      auto k_grown_t = (Kc * eb.reciprocal()).transpose(-1, -2);
      L = tril_fresh(chunk_matmul(rhs_k, k_grown_t), -1);
      P = tril_fresh(chunk_matmul(Q_in, k_grown_t));
      K_out = k_grown_t.transpose(-1, -2) * chunk_decay;  // e^{b_C − b_j} <= 1
    } else {
      // Differences are <= 0 in exact arithmetic (g <= 0); the clamp removes rounding (docs/models.md#numerical-stability) and
      // keeps every exp finite (<= 1), so zeroing the upper triangle after exp (tril) gives the
      // values of masking the exponent with −inf, without the slow boolean masked_fill.
      auto diff = (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0.0);
      auto gamma = tril_fresh(recording_grad() ? diff.exp() : diff.exp_());
      L = tril_fresh(chunk_matmul(Kb, Kc.transpose(-1, -2)) * gamma, -1);  // β_i k_i·k_j Γ_ij
      P = chunk_matmul(Q, Kc.transpose(-1, -2)) * gamma;
      K_out = Kc * (b_last - b).clamp_max(0.0).exp().unsqueeze(-1);
    }
  } else {
    L = tril_fresh(chunk_matmul(Kb, Kc.transpose(-1, -2)), -1);
    rhs_k = Kb;
    P = tril_fresh(chunk_matmul(Q, Kc.transpose(-1, -2)));
    Q_in = Q;
    K_out = Kc;
  }
  auto [U, W] = wy_solve(L, Vc * beta_c, rhs_k);
  // W S and Q_in S share S: one matmul per chunk on the rows [W; Q_in] (2C x K).
  auto WQ = torch::cat({W, Q_in}, -2);  // [B, H, N, 2C, K]

  // The chunk loop reads per-chunk [B, H, ...] views (chunk_matmul takes strided batches without copies).
  // unbind, not select(n) in the loop: the backward of N selects writes N full-size zero tensors (O(N²) traffic,
  // most of a 340M Gated DeltaNet step on the GPU by the profiler), unbind's stacks the N gradients once.
  const auto WQ_n = WQ.unbind(2), U_n = U.unbind(2), P_n = P.unbind(2), K_out_n = K_out.unbind(2);
  const auto decay_n = chunk_decay.defined() ? chunk_decay.unbind(2) : std::vector<torch::Tensor>();
  std::vector<torch::Tensor> outs;
  outs.reserve(N);
  for (int64_t n = 0; n < N; ++n) {
    auto WQS = chunk_matmul(WQ_n[n], S);          // [B, H, 2C, V]
    auto Un = U_n[n] - WQS.narrow(-2, 0, C);       // U' = U - W S
    outs.push_back(chunk_matmul(P_n[n], Un).add_(WQS.narrow(-2, C, C)));
    auto write = chunk_matmul(K_out_n[n].transpose(-1, -2), Un);
    S = decay_n.empty() ? S + write : S * decay_n[n] + write;
  }
  auto o = torch::stack(outs, 0)                // [N, B, H, C, V]
               .permute({1, 0, 3, 2, 4})         // [B, N, C, H, V]
               .reshape({B, N * C, H, V})
               .narrow(1, 0, T);
  return {o.to(v.scalar_type()), S};
}

torch::Tensor delta_rule_chunk_step(const torch::Tensor& S, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& beta, const torch::Tensor& g) {
  const int64_t n = k.size(2);
  if (n == 0) return S;
  const auto b = g.cumsum(-1);                                                     // [B, H, n]
  const auto eb = b.exp();
  const auto gamma = tril_fresh((b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0.0).exp());  // Γ_ij, i >= j
  const auto kb = k * beta.unsqueeze(-1);                                          // diag(β) K
  const auto L = tril_fresh(torch::matmul(kb, k.transpose(-1, -2)) * gamma, -1);
  const auto [U, W] = wy_solve(L, v * beta.unsqueeze(-1), kb * eb.unsqueeze(-1));
  // Γ's last row is e^{b_n − b_j}: the write keys K ⊙ e^{b_n − b}.
  const auto k_out = k * gamma.narrow(-2, n - 1, 1).transpose(-1, -2);
  return S * eb.narrow(-1, n - 1, 1).unsqueeze(-1) + torch::matmul(k_out.transpose(-1, -2), U - torch::matmul(W, S));
}

}  // namespace mnemo
