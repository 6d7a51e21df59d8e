// Chunked Gated Slot Attention (docs/models.md#gsa): the first pass chunk by chunk with the gate on the slot side,
// the second on GLA's chunk form (eager, or its fused kernels).
#include "runtime/gla/gla.h"
#include "runtime/gsa/gsa.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

constexpr int64_t kGsaMaskedChunk = 16;  // the chunk below which the masked form runs as it is

GsaResult gsa_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& s,
                    const torch::Tensor& g, double scale, const torch::Tensor& key_slots0,
                    const torch::Tensor& value_slots0, int64_t chunk_size, GlaChunkRoute route) {
  check_gsa_inputs("gsa_chunk", q, k, v, s, g, key_slots0, value_slots0);
  check_chunking("gsa_chunk", q.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), M = s.size(3);
  const int64_t C = std::min(chunk_size, T);
  auto Bcum = cumsum_rows(to_chunks(g.to(ct), C));  // [B, H, N, C, M], <= 0
  const bool factorisable = decay_factorisable(Bcum);
  // A span too long to factorise at this chunk: shorter chunks (the same function) before the masked [C, C, M] form,
  // whose size grows with the chunk.
  if (C > kGsaMaskedChunk && !factorisable)
    return gsa_chunk(q, k, v, s, g, scale, key_slots0, value_slots0, std::max(kGsaMaskedChunk, C / 4), route);
  auto Q = to_chunks(q.to(ct) * scale, C), Kc = to_chunks(k.to(ct), C);  // [B, H, N, C, K]
  auto S = to_chunks(s.to(ct), C);                                        // [B, H, N, C, M]
  auto B_last = Bcum.narrow(-2, C - 1, 1);                                 // [B, H, N, 1, M]
  auto A = tril_fresh(chunk_matmul(Q, Kc.transpose(-1, -2)));              // scale q_i·k_j, j <= i [.., C, C]
  torch::Tensor intra;
  if (factorisable) {
    // e^{B_i − B_j} = e^{B_i} e^{−B_j}, every factor within e^{±span}.
    auto decay = Bcum.exp();
    intra = chunk_matmul(A, S * decay.reciprocal()) * decay;
  } else {
    // The masked differences: e^{min(B_i − B_j, 0)} [.., C, C, M] (zero above the diagonal through A).
    auto diff = (Bcum.unsqueeze(-2) - Bcum.unsqueeze(-3)).clamp_max(0.0).exp();  // [.., i, j, M]
    intra = (A.unsqueeze(-1) * diff * S.unsqueeze(-3)).sum(-2);
  }
  // Slot-side state across chunks, as [M, K] (K̃ᵀ) so that the gate is on its rows: K̃ᵀ ← Diag(e^{B_C}) K̃ᵀ +
  // (S ⊙ e^{B_C − B})ᵀ K.
  auto increments = chunk_matmul((S * (B_last - Bcum).clamp_max(0.0).exp()).transpose(-1, -2), Kc);  // [.., M, K]
  auto S0 = key_slots0.defined() ? key_slots0.to(ct).transpose(-1, -2) : torch::zeros({B, H, M, K}, Q.options());
  auto [starts, last] = chunk_state_scan(B_last.exp().transpose(-1, -2), increments, S0);
  auto inter = chunk_matmul(Q, starts.transpose(-1, -2)) * Bcum.exp();  // e^{B} ⊙ (scale Q K̃_start)
  auto r = torch::softmax(from_chunks(inter + intra, T), -1);            // [B, T, H, M]
  auto second = route == GlaChunkRoute::kFusedKernel
                    ? gla_chunk_fused(r, s.to(ct), v.to(ct), g.to(ct), GlaGate::kKeyWise, 1.0, value_slots0, chunk_size)
                    : gla_chunk(r, s.to(ct), v.to(ct), g.to(ct), 1.0, value_slots0, chunk_size);
  return {second.o.to(q.scalar_type()), last.transpose(-1, -2), second.final_state};
}

}  // namespace mnemo
