// One chunk of the deep-memory dual form (memory.h) for the residual-MLP memory M(z) = z + W_1 GELU(W_2 φ(z)) as a
// single autograd node with a hand-written backward. The op-by-op form (dual_form_readout + memory_grad_terms +
// combine_state) records ~60 small ops per chunk and about twice as many backward nodes; at the benchmark shapes
// their dispatch overhead, not the arithmetic, dominated training. Used by Titans (§5.3: momentum,
// decay, inner-gradient clip) and the Atlas GD family (§7.6: Omega window, feature map, ℓ2 or dot loss). Two forms
// share its saved tensors (fused_chunk_forms.h): LibTorch ops on every device (fused_chunk.cpp) and, for fp32/fp64 on
// the CPU, row loops with direct GEMMs (fused_chunk_cpu.cpp).
//
// Per head, tokens as rows (n chunk tokens read, N ≥ n terms written: the Omega window adds the c-1 carried ones):
//   anchor pass   H0 = K̃ Â0ᵀ, G0 = GELU(H0), g_y = K + G0 Â1ᵀ - V (ℓ2) or -V (dot), Δ = (g_y Â1) ⊙ GELU'(H0)
//   clip (τ > 0)  s = |Δ|²|K̃|² + |g_y|²|G0|²,  f = τ / sqrt(max(τ², s)),  cols c0 = f Δ, c1 = f g_y; rows K̃, G0
//   read-out      H = A⊙(Q̃ W0ᵀ) + D⊙(Q̃ S0ᵀ) - (C ⊙ Q̃ K̃ᵀ) c0,  G = GELU(H),
//                 Y = Q + A⊙(G W1ᵀ) + D⊙(G S1ᵀ) - (C ⊙ G G0ᵀ) c1
//   chunk end     W_l' = a W_l + d S_l - c_lᵀ diag(c_end) r_l,   S_l' = p S_l - c_lᵀ diag(e_end) r_l
// (K̃ = φ(K), Q̃ = φ(Q); W0, S0, Â0 [hid, f]; W1, S1, Â1 [d, hid].) The coefficients (A, D, C and the chunk-end
// a, d, c_end, p, e_end) are inputs: the caller builds them from its gates under autograd, and their gradients
// come back from this node. tests/test_fused_chunk.cpp checks everything against autograd through the composed
// form in fp64.
#pragma once
#include <torch/torch.h>

#include "runtime/deep_memory/memory.h"

namespace mnemo {

struct FusedChunkInputs {
  torch::Tensor q, qf;     // [B, H, n, d], φ(q) [B, H, n, f] (undefined: q)
  torch::Tensor k, kf, v;  // [B, H, N, d], φ(k) [B, H, N, f] (undefined: k), [B, H, N, d]
  MemoryWeights w, s, anchor;  // {W_2, W_1} each; s empty: no momentum
  torch::Tensor A, D, C;       // [B, H, n], [B, H, n] (with momentum), [B, H, n, N]
  torch::Tensor a_end, d_end, c_end, p_end, e_end;  // [B, H], [B, H], [B, H, N], [B, H], [B, H, N] (d, p, e: momentum)
};

struct FusedChunkOutput {
  torch::Tensor y;     // [B, H, n, d]
  MemoryWeights w, s;  // chunk-end weights and momentum (s empty without momentum)
};

// The node's forms: on CUDA tensors (fp32/fp64) its CUDA kernel (chunk_kernel.cuh) in builds that link the kernels
// (unless MNEMO_FUSED_CUDA=0, runtime/kernels/fused_layers.h);
// on the CPU the row-loop form (fused_chunk_cpu.cpp) while fused CPU kernels are on, else the tensor form. Inside a
// DeepMemoryKernelHostScope(true), CPU tensors run the CUDA kernel's block code over a sequential host grid instead
// (the CPU tests prove the kernel's decomposition that way).
bool deep_memory_kernel_on_host();
void set_deep_memory_kernel_on_host(bool on);
// Passes (forward or backward) the kernel form has run in this process, on the host grid or the device.
int64_t deep_memory_kernel_passes();
class DeepMemoryKernelHostScope {
 public:
  explicit DeepMemoryKernelHostScope(bool on) : previous_(deep_memory_kernel_on_host()) {
    set_deep_memory_kernel_on_host(on);
  }
  ~DeepMemoryKernelHostScope() { set_deep_memory_kernel_on_host(previous_); }
  DeepMemoryKernelHostScope(const DeepMemoryKernelHostScope&) = delete;
  DeepMemoryKernelHostScope& operator=(const DeepMemoryKernelHostScope&) = delete;

 private:
  bool previous_;
};

// The memory kinds the fused chunk covers (the residual MLP; others use the composed form).
bool fused_chunk_supported(const DeepMemorySpec& spec);

// loss_l2: g_y = M(k) - v; else the dot-product loss g_y = -v. inner_grad_clip τ (0: off, memory.h clip_grad_terms).
FusedChunkOutput fused_mlp_chunk(const FusedChunkInputs& in, bool loss_l2, double inner_grad_clip);

}  // namespace mnemo
