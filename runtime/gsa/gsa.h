// Gated Slot Attention kernels (Zhang et al., "Gated Slot Attention for Efficient Linear-Time Sequence Modeling",
// arXiv 2409.07146 §3; docs/models.md#gsa): a bounded memory of M slots per head, written with a forget gate
// α_t = e^{g_t} ∈ (0, 1)^M and slot inputs s_t (the layer ties s = 1 − α), read through a softmax over the slots:
//   K̃_t = K̃_{t−1} Diag(α_t) + k_t s_tᵀ           [K, M]     (keys into the slots)
//   r_t = softmax(scale · q_tᵀ K̃_t)                [M]
//   Ṽ_t = Diag(α_t) Ṽ_{t−1} + s_t v_tᵀ            [M, V]     (values into the slots)
//   o_t = Ṽ_tᵀ r_t
// The second pass is GLA with q = r, k = s, v = v, key-wise gate g and scale 1 (runtime/gla/gla.h); the first is
// GLA's recurrence with the gate on the value side. q, k [B, T, H, K], v [B, T, H, V], s, g [B, T, H, M] (g <= 0);
// states K̃ [B, H, K, M] and Ṽ [B, H, M, V] (undefined = zeros), as flash-linear-attention's naive_recurrent_gsa.
#pragma once
#include <torch/torch.h>

#include "runtime/gla/gla.h"
#include "runtime/kernels/chunking.h"

namespace mnemo {

struct GsaResult {
  torch::Tensor o;                      // [B, T, H, V], q's dtype
  torch::Tensor key_slots, value_slots;  // final K̃ [B, H, K, M] and Ṽ [B, H, M, V], compute dtype
};

// Token-by-token reference of both passes.
GsaResult gsa_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& s,
                        const torch::Tensor& g, double scale, const torch::Tensor& key_slots0 = {},
                        const torch::Tensor& value_slots0 = {});

// Chunked form. First pass per chunk, with B the in-chunk cumulative log gate [C, M] and K̃_0 the state at the
// chunk's start: scores = e^{B} ⊙ (scale Q K̃_0) + Σ_{j<=i} (scale q_i·k_j) s_j ⊙ e^{B_i − B_j}; the intra-chunk sum
// is (scale tril(Q Kᵀ)) (S ⊙ e^{−B}) ⊙ e^{B} when the span of B allows (decay_factorisable), else the masked
// differences e^{min(B_i − B_j, 0)} for every (i, j, slot), after retrying with chunks a quarter as long (down to 16)
// while that does not factorise. The softmax, then GLA's chunk form for the second pass: eager, or GLA's fused chunk
// kernels with key-wise gates (`route`; the mixer takes them on CUDA tensors: gla_chunk_route).
GsaResult gsa_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& s,
                    const torch::Tensor& g, double scale, const torch::Tensor& key_slots0 = {},
                    const torch::Tensor& value_slots0 = {}, int64_t chunk_size = 64,
                    GlaChunkRoute route = GlaChunkRoute::kEager);

void check_gsa_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& s, const torch::Tensor& g, const torch::Tensor& key_slots0,
                      const torch::Tensor& value_slots0);

}  // namespace mnemo
