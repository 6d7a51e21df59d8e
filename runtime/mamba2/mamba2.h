// Mamba-2 SSD scan (docs/models.md#mamba2; fixture `mamba2_ssd`): no D skip, no z gate, one B/C per
// head (the mixer broadcasts groups to heads). Per batch b and head h, with a_t = A_h · dt_t <= 0:
//   Hs_t = exp(a_t) · Hs_{t-1} + (dt_t · x_t)ᵀ B_t        (P×N outer product)
//   y_t  = Hs_t C_tᵀ                                       (read after write)
// x [B, T, H, P], dt [B, T, H] (> 0, softplus already applied), A [H] (< 0), B, C [B, T, H, N];
// state Hs [B, H, P, N] (head dim first, as mamba_ssm; undefined = zeros).
// In fla terms: simple GLA with q = C, k = B, v = dt·x, g = A·dt, scale 1 and S = Hsᵀ.
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

// Token-by-token reference (mamba_ssm's selective_state_update without D / z).
RecurrentResult mamba2_ssd_recurrent(const torch::Tensor& x, const torch::Tensor& dt,
                                     const torch::Tensor& A, const torch::Tensor& B,
                                     const torch::Tensor& C, const torch::Tensor& initial_state = {});

// Chunked SSD (mamba_ssm ssd_minimal_discrete): per chunk L = exp(segsum(a)) with the stable
// segment sum (masked cumsum, −inf above the diagonal),
//   Y = (C Bᵀ ⊙ L) X + (C ⊙ e^{cumsum a}) Hsᵀ,   Hs <- e^{Σa} Hs + Σ_j e^{a_C − a_j} X_jᵀ B_j.
RecurrentResult mamba2_ssd_chunk(const torch::Tensor& x, const torch::Tensor& dt,
                                 const torch::Tensor& A, const torch::Tensor& B,
                                 const torch::Tensor& C, const torch::Tensor& initial_state = {},
                                 int64_t chunk_size = 64);

// The chunked SSD with B, C given per group: B, C [B, T, G, N], heads h = g·(H/G) .. (g+1)·(H/G)-1
// share group g (H a multiple of G). Same result as mamba2_ssd_chunk on B, C repeated to the heads
// (up to rounding), but C Bᵀ is formed once per group and the state write / read are one matmul per
// group over all its heads. The mixer's chunk form calls this directly.
RecurrentResult mamba2_ssd_chunk_grouped(const torch::Tensor& x, const torch::Tensor& dt,
                                         const torch::Tensor& A, const torch::Tensor& B,
                                         const torch::Tensor& C, const torch::Tensor& initial_state = {},
                                         int64_t chunk_size = 64);

// The same chunked SSD through the gated-linear-attention fused chunk kernel (runtime/mamba2/chunk_fused.cpp): simple
// GLA with q = C, k = B (groups broadcast to the heads), v = dt·x, g = A·dt, scale 1, state Hsᵀ; CUDA tensors run the
// CUDA kernels (builds with MNEMO_CUDA_KERNELS), CPU tensors the same block code over the host grid. cu_seqlens
// (int32 [N + 1], B = 1) packs N sequences, the initial and final states then [N, H, P, N_state].
RecurrentResult mamba2_ssd_chunk_fused(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                       const torch::Tensor& B, const torch::Tensor& C,
                                       const torch::Tensor& initial_state = {}, int64_t chunk_size = 64,
                                       const torch::Tensor& cu_seqlens = {});
// Whether mamba2_ssd_chunk_fused runs on tensors like `like` in this build (CPU: always; CUDA: with the kernels).
bool mamba2_fused_kernel_available(const torch::Tensor& like);

// segsum(a)[.., i, j] = Σ_{j < r <= i} a_r for i >= j, −inf above the diagonal. a: [.., C].
torch::Tensor ssd_segsum(const torch::Tensor& a);

// The shape checks of the grouped forms (chunk_grouped, chunk_fused): x [B, T, H, P], dt [B, T, H], A [H], B and C
// [B, T, G, N] with H a multiple of G, the initial state [states, H, P, N]; Error naming `op` and the input.
struct GroupedSsdShape {
  int64_t B, T, H, P, G, N;
};
GroupedSsdShape check_grouped_ssd_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                                         const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                                         const torch::Tensor& initial_state, int64_t states);

// Shape checks shared by both forms (mnemo::Error naming the op and the input).
void check_mamba2_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                         const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                         const torch::Tensor& s0);

// The heads of a Mamba-style layer (Mamba2, Mamba-3): d_inner = mamba_expand · d_model in H heads of P = mamba_head_dim,
// G groups of B and C (each shared by H / G heads), state size N. Errors name `family` and the argument at fault.
struct MambaHeads {
  int64_t d_inner = 0, P = 0, H = 0, G = 0, N = 0;
};
MambaHeads mamba_heads(const std::string& family, int64_t d_model, double expand, int64_t head_dim, int64_t ngroups,
                       int64_t d_state);
// The output of a Mamba2-style layer before out_proj: RMSNorm over groups of d_inner / groups of y ⊙ SiLU(z) (gate,
// then norm: fla's RMSNormGated with norm_before_gate false), times `weight` [d_inner]; y and z [B, T, d_inner].
torch::Tensor mamba_gated_norm(const torch::Tensor& y, const torch::Tensor& z, const torch::Tensor& weight,
                               int64_t groups, double eps);
// The step range and the output norm's epsilon of a Mamba-style layer: Error naming `family` and the argument.
void check_mamba_dt_and_norm(const std::string& family, double dt_min, double dt_max, double norm_eps);

class KernelOpRegistry;
// Adds the fixture op `mamba2_ssd` (forms "recurrent", "chunk", "fused_chunk").
void register_mamba2_ops(KernelOpRegistry& r);

}  // namespace mnemo
