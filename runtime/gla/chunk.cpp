// Chunk-wise GLA with secondary (sub-chunk) chunking for the intra-chunk matrix (docs/models.md#gla, docs/models.md#numerical-stability).
#include "runtime/gla/gla.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

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
    A = per_channel_decayed_scores(Q, Kc, Bcum, sub_chunk);
    k_decayed = Kc * (B_last - Bcum).clamp_max(0.0).exp();
  }
  auto intra = chunk_matmul(A, Vc);
  auto kv = chunk_matmul(k_decayed.transpose(-1, -2), Vc);  // [B, H, N, K, V]
  auto chunk_decay = last_decay.transpose(-1, -2);           // [B, H, N, K, 1]

  auto S0 = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, Q.options());
  auto [starts, S] = chunk_state_scan(chunk_decay, kv, S0);
  auto O = chunk_matmul(q_decayed, starts).add_(intra);  // add backward saves nothing
  return {from_chunks(O, T).to(q.scalar_type()), S};
}

}  // namespace mnemo
