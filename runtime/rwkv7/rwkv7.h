// RWKV-7 "Goose" kernels (docs/models.md#rwkv-7; Peng et al., arXiv 2503.14456 §4; fixture op `rwkv7`): the
// generalised delta rule with a diagonal-plus-low-rank transition. Row-vector convention, state S [B, H, K, V]
// (the paper's state transposed), read after write:
//   S_t = (Diag(e^{w_t}) + b_tᵀ a_t) S_{t-1} + k_tᵀ v_t      w_t ∈ R^K, w <= 0 (log decay per key channel)
//   o_t = (scale r_t) S_t
// i.e. S_t = Diag(e^{w_t}) S_{t-1} + b_tᵀ (a_t S_{t-1}) + k_tᵀ v_t: the removal a_t S_{t-1} reads the state before
// the decay. RWKV-7's layer uses a = −κ̂, b = κ̂ ⊙ a_in (runtime/rwkv7/mixer.cpp); the kernels take any a, b.
// Layout: r, w, k, a, b [B, T, H, K], v [B, T, H, V]. With a = −β (k ⊙ e^{w}), b = k and k' = β k this is Kimi Delta
// Attention (runtime/kda). Both forms are differentiable (plain autograd ops) and compute in fp32, or fp64 when any
// input is fp64; o is returned in v's dtype, the final state in the compute dtype.
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

using Rwkv7Result = RecurrentResult;  // o [B, T, H, V], final_state [B, H, K, V]

// Token-by-token recurrence: O(T) sequential steps; T == 1 is the O(1) decode step. initial_state may be undefined.
Rwkv7Result rwkv7_recurrent(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k,
                            const torch::Tensor& v, const torch::Tensor& a, const torch::Tensor& b,
                            const torch::Tensor& initial_state, double scale);

// Chunk-wise WY/UT form (chunk.cpp gives the derivation); per-channel decayed score matrices are factorised products
// when the chunk's decay span allows it, else built from sub-chunks of `sub_chunk` rows. Exact rewrite of the
// recurrence; a shorter last chunk is padded with inert tokens (k = a = b = 0, w = 0).
Rwkv7Result rwkv7_chunk(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& initial_state,
                        double scale, int64_t chunk_size, int64_t sub_chunk = 16);

// The width of one of the layer's low-rank projections: `given` when > 0, else max(32, round(factor √d_model / 32) ·
// 32) (fla's rule; factor 2.5 d_h/64 for the decay and a, 1.7 d_h/64 for the value residual's gate, 5 for g).
int64_t rwkv7_low_rank_dim(int64_t given, double factor, int64_t d_model);

// Shape checks shared by both forms; throw mnemo::Error naming the tensor and its shape.
void check_rwkv7_inputs(const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& k,
                        const torch::Tensor& v, const torch::Tensor& a, const torch::Tensor& b,
                        const torch::Tensor& initial_state);

}  // namespace mnemo
