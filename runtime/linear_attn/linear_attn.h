// Linear attention kernels (docs/models.md#linear-attention; fixtures `linear_attn`, `linear_attn_norm`).
//   S_t = S_{t-1} + k_tᵀ v_t,   o_t = q̃_t S_t                      (q̃ = scale · q, read after write)
// Optional Katharopoulos normaliser (normalize = true):
//   z_t = z_{t-1} + k_t,        o_t = (q̃_t S_t) / (q̃_t · z_t + 1e-10)
// q, k [B, T, H, K], v [B, T, H, V]; state S [B, H, K, V] and key sum z [B, H, K] (undefined
// tensors = zeros). Both forms are differentiable LibTorch graphs and give the same result.
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

constexpr double kLinearAttnDenominatorEps = 1e-10;

struct LinearAttnResult {
  torch::Tensor o;            // [B, T, H, V], input dtype
  torch::Tensor final_state;  // [B, H, K, V], fp32 (fp64 for fp64 inputs)
  torch::Tensor final_z;      // [B, H, K] when normalize, else undefined
};

// Token-by-token reference recurrence.
LinearAttnResult linear_attn_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, double scale,
                                       const torch::Tensor& initial_state = {}, bool normalize = false,
                                       const torch::Tensor& initial_z = {});

// Chunk-wise parallel form: O = Q S + tril(Q Kᵀ) V, S <- S + Kᵀ V per chunk of `chunk_size`
// (the last chunk is zero-padded). With normalize, z rides along as an extra value column of ones.
LinearAttnResult linear_attn_chunk(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, double scale,
                                   const torch::Tensor& initial_state = {}, int64_t chunk_size = 64,
                                   bool normalize = false, const torch::Tensor& initial_z = {});

// Shape checks shared by both forms (mnemo::Error naming the op and the input).
void check_linear_attn_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& s0, bool normalize,
                              const torch::Tensor& z0);

class KernelOpRegistry;
// Adds the fixture ops `linear_attn` and `linear_attn_norm` (forms "recurrent", "chunk").
void register_linear_attn_ops(KernelOpRegistry& r);

}  // namespace mnemo
