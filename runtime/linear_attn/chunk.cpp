// Chunk-wise parallel linear attention (docs/models.md#linear-attention): O = Q S + tril(Q Kᵀ) V; S <- S + Kᵀ V.
// With no decay the chunk-start states are an exclusive prefix sum of the per-chunk Kᵀ V.
#include "runtime/linear_attn/linear_attn.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

LinearAttnResult linear_attn_chunk(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, double scale,
                                   const torch::Tensor& initial_state, int64_t chunk_size,
                                   bool normalize, const torch::Tensor& initial_z) {
  check_linear_attn_inputs("linear_attn_chunk", q, k, v, initial_state, normalize, initial_z);
  check_chunking("linear_attn_chunk", q.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = std::min(chunk_size, T);
  auto Q = to_chunks(q.to(dt) * scale, C), Kc = to_chunks(k.to(dt), C);  // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);                                        // [B, H, N, C, V]
  auto S0 = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, Q.options());
  if (normalize) {
    // z is the state of an extra value column of ones: [S | z] is read and written like S.
    // Padded rows have k = 0, so their ones add nothing.
    Vc = torch::cat({Vc, torch::ones_like(Vc.narrow(-1, 0, 1))}, -1);
    auto z0 = initial_z.defined() ? initial_z.to(dt) : torch::zeros({B, H, K}, Q.options());
    S0 = torch::cat({S0, z0.unsqueeze(-1)}, -1);
  }
  auto scores = tril_fresh(chunk_matmul(Q, Kc.transpose(-1, -2)));  // [B, H, N, C, C], causal
  auto kv = chunk_matmul(Kc.transpose(-1, -2), Vc);  // [B, H, N, K, V(+1)]
  const int64_t N = kv.size(2);
  torch::Tensor S_start, S_final;  // state before each chunk, after the last
  if (recording_grad()) {
    auto inclusive = S0.unsqueeze(2) + torch::cumsum(kv, 2);  // state after each chunk
    S_start = torch::cat({S0.unsqueeze(2), inclusive.narrow(2, 0, N - 1)}, 2);
    S_final = inclusive.select(2, N - 1);
  } else {  // the same sums written in place (at::cumsum over a middle dim is slow on CPU)
    S_start = torch::empty_like(kv);
    S_start.select(2, 0).copy_(S0);
    for (int64_t n = 1; n < N; ++n) {
      auto dst = S_start.select(2, n);
      torch::add_out(dst, S_start.select(2, n - 1), kv.select(2, n - 1));
    }
    S_final = S_start.select(2, N - 1) + kv.select(2, N - 1);
  }
  auto O = chunk_matmul(Q, S_start).add_(chunk_matmul(scores, Vc));  // add backward saves nothing
  auto o = from_chunks(O, T);  // [B, T, H, V(+1)]
  LinearAttnResult r;
  if (normalize) {
    auto num = o.narrow(-1, 0, V), den = o.narrow(-1, V, 1);
    r.o = (num / (den + kLinearAttnDenominatorEps)).to(q.scalar_type());
    r.final_state = S_final.narrow(-1, 0, V);
    r.final_z = S_final.select(-1, V);
  } else {
    r.o = o.to(q.scalar_type());
    r.final_state = S_final;
  }
  return r;
}

}  // namespace mnemo
