// Chunk-wise scalar-decay linear attention (docs/models.md#retnet, docs/models.md#numerical-stability rules 2–3): all chunks' intra-chunk
// parts in parallel, then a short sequential pass over chunks for the states.
#include <limits>

#include "runtime/retnet/retnet.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

RecurrentResult simple_gla_chunk(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& g, double scale,
                                 const torch::Tensor& initial_state, int64_t chunk_size) {
  check_simple_gla_inputs("simple_gla_chunk", q, k, v, g, initial_state);
  check_chunking("simple_gla_chunk", q.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = std::min(chunk_size, T);
  auto Q = to_chunks(q.to(dt) * scale, C), Kc = to_chunks(k.to(dt), C);  // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);                                        // [B, H, N, C, V]
  auto b = torch::cumsum(to_chunks(g.to(dt), C), -1);                      // [B, H, N, C]
  auto b_last = b.narrow(-1, C - 1, 1);                                    // [B, H, N, 1]
  auto chunk_decay = b_last.exp().unsqueeze(-1);                           // [B, H, N, 1, 1]

  // Intra-chunk A = (Q Kᵀ) ⊙ Γ, Γ_ij = e^{b_i − b_j} for i >= j. Factorised (chunking.h) when the
  // decay span allows: Γ's rows and columns scale Q and K, and the one matmul is masked afterwards.
  // Otherwise Γ from differences clamped to <= 0 before exp, so every entry is finite (<= 1) and
  // zeroing the upper triangle after exp (tril_) gives exactly the values of masking with −inf.
  auto decay = b.exp().unsqueeze(-1);  // e^{b_i} <= 1
  auto q_decayed = Q * decay;
  torch::Tensor scores, k_decayed;
  if (decay_factorisable(b)) {
    auto k_grown = Kc * decay.reciprocal();  // e^{−b_j} <= e^{span}
    scores = tril_fresh(chunk_matmul(q_decayed, k_grown.transpose(-1, -2)));
    k_decayed = k_grown * chunk_decay;  // e^{b_C − b_j} <= 1
  } else {
    auto diff = (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0.0);
    auto gamma = tril_fresh(recording_grad() ? diff.exp() : diff.exp_());
    scores = chunk_matmul(Q, Kc.transpose(-1, -2));
    scores = recording_grad() ? scores * gamma : scores.mul_(gamma);
    k_decayed = Kc * (b_last - b).clamp_max(0.0).exp().unsqueeze(-1);
  }
  auto intra = chunk_matmul(scores, Vc);
  auto kv = chunk_matmul(k_decayed.transpose(-1, -2), Vc);           // [B, H, N, K, V]

  auto S0 = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, Q.options());
  auto [starts, S] = chunk_state_scan(chunk_decay, kv, S0);
  auto O = chunk_matmul(q_decayed, starts).add_(intra);  // [B, H, N, C, V]
  return {from_chunks(O, T).to(q.scalar_type()), S};
}

}  // namespace mnemo
