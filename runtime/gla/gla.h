// Gated Linear Attention kernels (docs/models.md#gla; fixture `gla`): key-wise log-decay gk <= 0.
//   S_t[i, :] = exp(gk_t[i]) · S_{t-1}[i, :] + k_t[i] · v_t,     o_t = q̃_t S_t   (q̃ = scale · q)
// q, k, gk [B, T, H, K], v [B, T, H, V]; state [B, H, K, V] (undefined = zeros).
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

// Token-by-token reference recurrence.
RecurrentResult gla_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& gk, double scale,
                              const torch::Tensor& initial_state = {});

// Chunk-wise form with secondary chunking (as fla): B = in-chunk cumsum of gk,
//   O = (Q ⊙ e^B) S + A V,  A_ij = Σ_c Q_ic K_jc e^{B_ic − B_jc} (i >= j),
//   S <- Diag(e^{B_C}) S + (K ⊙ e^{B_C − B})ᵀ V.
// When the in-chunk decay span allows (decay_factorisable), A = tril((Q ⊙ e^B)(K ⊙ e^{−B})ᵀ), one
// matmul per chunk. Otherwise A is built from sub-chunks of `sub_chunk` rows (the largest divisor of the chunk size not above
// it): diagonal blocks from masked [c, c, K] exponents, off-diagonal blocks against the first row
// r of the later block, (Q_I ⊙ e^{B_I − r}) (K_J ⊙ e^{r − B_J})ᵀ, where both exponents are <= 0.
// No exp(−B) is ever formed alone (docs/models.md#numerical-stability rule 4).
RecurrentResult gla_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& gk, double scale, const torch::Tensor& initial_state = {},
                          int64_t chunk_size = 64, int64_t sub_chunk = 16);

// The fused chunk kernel of the family (chunk_kernel.cuh) as one autograd node: forward and backward in one
// kernel each. The gate is key-wise gk [B, T, H, K] (GLA), a per-head scalar g [B, T, H] (simple GLA, RetNet) or
// none (undefined; linear attention); q, k, v in fp32, fp64 or bf16 (state and gates in fp32, fp64 for fp64).
// cu_seqlens (int32 [N + 1], B = 1) packs N sequences of varying length into one batch row; the initial state
// and the final state are then [N, H, K, V]. CUDA tensors run the CUDA kernels (builds with MNEMO_CUDA_KERNELS;
// the tiling then follows the device's shared memory), CPU tensors the same block code over a sequential host
// grid with `tiling` (chunk = chunk_size).
enum class GlaGate { kKeyWise, kScalar, kNone };
struct GlaFusedTiling {
  int64_t sub_chunk = 16;
  int64_t tile_v = 0;  // value columns per block; 0 = all of V
};
RecurrentResult gla_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& gate, GlaGate gate_kind, double scale,
                                const torch::Tensor& initial_state = {}, int64_t chunk_size = 64,
                                const torch::Tensor& cu_seqlens = {}, const GlaFusedTiling& tiling = {});
// Whether gla_chunk_fused runs on tensors like `like` in this build (CPU: always; CUDA: with the CUDA kernels).
bool gla_fused_kernel_available(const torch::Tensor& like);

// How a family whose chunk form contains GLA's (Mamba-3's SISO scan, GSA's second pass) runs that part: the eager
// chunk form (gla_chunk, simple_gla_chunk) or the fused chunk kernels (gla_chunk_fused: the CUDA kernel on CUDA
// tensors, its block code over the host grid on CPU tensors, which is how the CPU tests prove that route).
enum class GlaChunkRoute { kEager, kFusedKernel };
// The route a mixer takes on tensors like `like`: the fused kernels on CUDA tensors in builds with the CUDA kernels,
// the eager chunk form otherwise.
GlaChunkRoute gla_chunk_route(const torch::Tensor& like);

// Shape checks shared by both forms (mnemo::Error naming the op and the input).
void check_gla_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                      const torch::Tensor& v, const torch::Tensor& gk, const torch::Tensor& s0);

class KernelOpRegistry;
// Adds the fixture op `gla` (forms "recurrent", "chunk").
void register_gla_ops(KernelOpRegistry& r);

}  // namespace mnemo
