// Scalar-decay linear attention ("simple GLA", fixture `simple_gla`) and RetNet retention
// (docs/models.md#retnet; fixture `retention`). Per batch b, head h, with log-decay g_t <= 0:
//   S_t = exp(g_t) · S_{t-1} + k_tᵀ v_t,     o_t = q̃_t S_t        (q̃ = scale · q)
// RetNet is the special case g_t = ln γ_h with the fixed γ_h = 1 − 2^(−5−h).
// q, k [B, T, H, K], v [B, T, H, V], g [B, T, H]; state [B, H, K, V] (undefined = zeros).
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

// Token-by-token reference recurrence.
RecurrentResult simple_gla_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& g, double scale,
                                     const torch::Tensor& initial_state = {});

// Chunk-wise form (per chunk, b_i = Σ_{r<=i} g_r inside the chunk, Γ_ij = exp(b_i − b_j), i >= j,
// masked before exp):  O = (Q ⊙ e^b) S + (Q Kᵀ ⊙ Γ) V;  S <- e^{b_C} S + (K ⊙ e^{b_C − b})ᵀ V.
RecurrentResult simple_gla_chunk(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& g, double scale,
                                 const torch::Tensor& initial_state = {}, int64_t chunk_size = 64);

// RetNet's fixed per-head log-decays ln(1 − 2^(−5−h)), h = 0..H−1, as a [H] tensor.
torch::Tensor retnet_log_decay(int64_t n_heads, const torch::TensorOptions& options);

// Retention = simple GLA with g_t = retnet_log_decay(H) for every token.
RecurrentResult retention_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, double scale,
                                    const torch::Tensor& initial_state = {});
RecurrentResult retention_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                double scale, const torch::Tensor& initial_state = {},
                                int64_t chunk_size = 64);

// Shape checks shared by both forms (mnemo::Error naming the op and the input).
void check_simple_gla_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& s0);

class KernelOpRegistry;
// Adds the fixture ops `simple_gla` and `retention` (forms "recurrent", "chunk").
void register_retnet_ops(KernelOpRegistry& r);

}  // namespace mnemo
