// Kimi Delta Attention kernels (docs/models.md#kda; Kimi Linear, arXiv 2510.26692 §3; fixture op `kda`): the gated
// delta rule with a decay per key channel. Row-vector convention, state S [B, H, K, V], read after write:
//   S' = Diag(exp(g_t)) S_{t-1}              g_t ∈ R^K, g <= 0 (log decay per key channel)
//   u_t = beta_t (v_t - k_t S')
//   S_t = S' + k_t^T u_t
//   o_t = (scale q_t) S_t
// Layout: q, k [B, T, H, K], v [B, T, H, V], beta [B, T, H], g [B, T, H, K]. With g constant across K this is Gated
// DeltaNet (runtime/delta_rule). Both forms are differentiable (plain autograd ops) and compute in fp32, or fp64 when
// any input is fp64; o is returned in v's dtype, the final state in the compute dtype.
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

using KdaResult = RecurrentResult;  // o [B, T, H, V], final_state [B, H, K, V]

// Token-by-token recurrence: O(T) sequential steps; T == 1 is the O(1) decode step. initial_state may be undefined.
KdaResult kda_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state,
                        double scale);

// Chunk-wise WY/UT form (chunk.cpp gives the derivation); the per-channel decayed score matrices are built from
// sub-chunks of `sub_chunk` rows (runtime/kernels/chunking.h per_channel_decayed_scores). Exact rewrite of the
// recurrence; a shorter last chunk is padded with inert tokens (k = 0, beta = 0, g = 0).
KdaResult kda_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& beta,
                    const torch::Tensor& g, const torch::Tensor& initial_state, double scale, int64_t chunk_size,
                    int64_t sub_chunk = 16);

// Shape checks shared by both forms; throw mnemo::Error naming the tensor and its shape.
void check_kda_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state);

}  // namespace mnemo
