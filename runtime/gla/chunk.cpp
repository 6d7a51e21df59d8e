// Chunk-wise GLA with secondary (sub-chunk) chunking for the intra-chunk matrix (docs/models.md#gla, docs/models.md#numerical-stability).
#include <limits>

#include "runtime/gla/gla.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace {

int64_t largest_divisor_at_most(int64_t n, int64_t cap) {
  for (int64_t d = std::max<int64_t>(1, std::min(n, cap)); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Intra-chunk scores A [.., C, C] (zero above the diagonal) from Q, K, B [.., C, K].
torch::Tensor intra_chunk_scores(const torch::Tensor& Q, const torch::Tensor& K,
                                 const torch::Tensor& B, int64_t c) {
  const int64_t C = Q.size(-2), Kd = Q.size(-1), S = C / c;
  auto lead = Q.sizes().vec();
  lead.resize(lead.size() - 2);
  auto with_lead = [&](std::initializer_list<int64_t> tail) {
    auto shape = lead;
    shape.insert(shape.end(), tail);
    return shape;
  };
  auto Qs = Q.reshape(with_lead({S, c, Kd})), Ks = K.reshape(with_lead({S, c, Kd}));
  auto Bs = B.reshape(with_lead({S, c, Kd}));
  auto A = torch::zeros(with_lead({C, C}), Q.options());

  // Diagonal blocks: A_ij = Σ_k Q_ik K_jk exp(B_ik − B_jk), i >= j inside the block. The clamped
  // differences are <= 0, so every term is finite and the upper triangle is zeroed after the sum
  // (same values as masking the exponent with −inf).
  auto diff = Bs.unsqueeze(-2) - Bs.unsqueeze(-3);                             // [.., S, c, c, K]
  diff = recording_grad() ? diff.clamp_max(0.0) : diff.clamp_max_(0.0);
  auto QK = Qs.unsqueeze(-2) * Ks.unsqueeze(-3);
  auto A_diag = tril_fresh((recording_grad() ? QK * diff.exp() : QK.mul_(diff.exp_())).sum(-1));
  const int64_t nd = A.dim();
  // View A as [.., S(I), c, S(J), c]; its I == J blocks are the diagonal over dims (-4, -2),
  // returned as [.., c, c, S].
  auto A_blocks = A.view(with_lead({S, c, S, c}));
  std::vector<int64_t> s_last;
  for (int64_t d = 0; d < nd - 2; ++d) s_last.push_back(d);
  s_last.insert(s_last.end(), {nd - 1, nd, nd - 2});  // A_diag [.., S, c, c] -> [.., c, c, S]
  A_blocks.diagonal(0, nd - 2, nd).copy_(A_diag.permute(s_last));

  // Off-diagonal blocks J < I against r_I = B at the first row of block I: for block row I, one
  // product q_n [.., c, K] @ k_nᵀ [.., K, I·c] over all earlier rows.
  for (int64_t I = 1; I < S; ++I) {
    auto r = Bs.select(-3, I).narrow(-2, 0, 1);                                 // [.., 1, K]
    auto q_n = Qs.select(-3, I) * (Bs.select(-3, I) - r).clamp_max(0.0).exp();  // [.., c, K]
    auto B_prev = B.narrow(-2, 0, I * c), K_prev = K.narrow(-2, 0, I * c);       // [.., I·c, K]
    auto k_n = K_prev * (r - B_prev).clamp_max(0.0).exp();
    A.narrow(-2, I * c, c).narrow(-1, 0, I * c).copy_(chunk_matmul(q_n, k_n.transpose(-1, -2)));
  }
  return A;
}

}  // namespace

RecurrentResult gla_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& gk, double scale, const torch::Tensor& initial_state,
                          int64_t chunk_size, int64_t sub_chunk) {
  check_gla_inputs("gla_chunk", q, k, v, gk, initial_state);
  check_chunking("gla_chunk", q.size(1), chunk_size);
  if (sub_chunk < 1) throw Error("gla_chunk: sub_chunk must be >= 1, got " + std::to_string(sub_chunk));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = std::min(chunk_size, T);
  auto Q = to_chunks(q.to(dt) * scale, C), Kc = to_chunks(k.to(dt), C);  // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);                                        // [B, H, N, C, V]
  auto Bcum = cumsum_rows(to_chunks(gk.to(dt), C));                      // [B, H, N, C, K]
  const int64_t N = Bcum.size(2);
  auto B_last = Bcum.narrow(-2, C - 1, 1);                                 // [B, H, N, 1, K]

  auto decay = Bcum.exp();                  // e^{B} <= 1
  auto last_decay = B_last.exp();           // e^{B_C}, [B, H, N, 1, K]
  auto q_decayed = Q * decay;
  torch::Tensor A, k_decayed;
  if (decay_factorisable(Bcum)) {
    // Whole chunk against the reference row before it (chunking.h): A = tril((Q ⊙ e^B)(K ⊙ e^{−B})ᵀ),
    // every factor within e^{±span} (so 1 / e^B is e^{−B} to rounding).
    auto k_grown = Kc * decay.reciprocal();
    A = tril_fresh(chunk_matmul(q_decayed, k_grown.transpose(-1, -2)));
    k_decayed = k_grown * last_decay;  // e^{B_C − B} <= 1
  } else {
    A = intra_chunk_scores(Q, Kc, Bcum, largest_divisor_at_most(C, sub_chunk));
    k_decayed = Kc * (B_last - Bcum).clamp_max(0.0).exp();
  }
  auto intra = chunk_matmul(A, Vc);
  auto kv = chunk_matmul(k_decayed.transpose(-1, -2), Vc);  // [B, H, N, K, V]
  auto chunk_decay = last_decay.transpose(-1, -2);           // [B, H, N, K, 1]

  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, Q.options());
  std::vector<torch::Tensor> starts;
  starts.reserve(N);
  // unbind, not select(n) in the loop: the backward of N selects writes N full-size zero tensors (O(N²) traffic,
  // most of a 340M Gated DeltaNet step on the GPU by the profiler), unbind's stacks the N gradients once.
  const auto decay_n = chunk_decay.unbind(2), kv_n = kv.unbind(2);
  for (int64_t n = 0; n < N; ++n) {
    starts.push_back(S);
    S = decay_n[n] * S + kv_n[n];
  }
  auto O = chunk_matmul(q_decayed, torch::stack(starts, 2)).add_(intra);  // add backward saves nothing
  return {from_chunks(O, T).to(q.scalar_type()), S};
}

}  // namespace mnemo
