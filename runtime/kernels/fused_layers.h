// RMSNorm, the SwiGLU gate and RoPE as fused kernels (runtime/kernels/fused_layers.cuh), each one autograd node with
// a one-pass forward and backward. CUDA tensors run the CUDA kernels (builds with MNEMO_CUDA_KERNELS), CPU tensors
// the same block code over the sequential host grid — the form the CPU tests check against the eager formulas of
// runtime/layers.cpp in fp64, fp32 and bf16 (tests/test_cuda_kernels_layers.cpp). On the CPU the layers keep their own
// fused kernels (runtime/kernels/fused_cpu.h); these are what the layers run on CUDA (fused_layers_eligible).
// A backward under create_graph differentiates the eager formula, so higher-order gradients stay right.
#pragma once
#include <torch/torch.h>

namespace mnemo {

// Whether these kernels can run on `like`'s device: CPU always (the host grid), CUDA in builds with the kernels.
bool fused_layers_kernel_available(const torch::Tensor& like);
// On unless MNEMO_FUSED_CUDA=0 (read once): how before/after is measured on one binary.
bool fused_cuda_layers_enabled();
void set_fused_cuda_layers_enabled(bool on);
// What the layers ask before taking these kernels: every defined tensor on one CUDA device with one dtype (fp32,
// bf16 or fp64), the kernels compiled in and enabled.
bool fused_layers_eligible(at::ArrayRef<torch::Tensor> tensors);

// RMSNorm over the last dim: y = x · (mean x² + eps)^-½ · w; weight [D] of x's dtype.
torch::Tensor rms_norm_fused_kernel(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// h = silu(g) ⊙ u of the gate and up projections (one shape and dtype).
torch::Tensor swiglu_gate_fused_kernel(const torch::Tensor& g, const torch::Tensor& u);
// Rotate-half RoPE of x [B, H, T, D] (D even) with tables cos, sin [T, D] (each half the same) in fp32 (fp64 for an
// fp64 x); the output keeps x's layout.
torch::Tensor rope_fused_kernel(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace mnemo
