// The CPU form of DOT's read of the chunk-start memory (chunk.cpp, KernelReadFn): reads = κ a with
// κ = exp(s X Kᵀ), X [B, H, R, d] (the window keys and the queries), K the first S0 rows of the keys array, a the
// coefficients [B, H, S0, dv], s [1, H, 1, 1]. Per (batch, head), in tiles of keys: each tile's product, exp and read
// (forward), and its κ̄ ⊙ κ and the three products of the backward run while the tile is in cache, where the tensor
// form makes a pass over the whole [R, S0] matrix for each of exp and κ̄ ⊙ κ. Same equations; tests run both forms.
#pragma once
#include <torch/torch.h>

namespace mnemo::kernel_read_cpu {

// fused_cpu_eligible (CPU, one dtype fp32/fp64, fused kernels on) and a unit last stride on x, keys, a.
bool eligible(const torch::Tensor& x, const torch::Tensor& keys, const torch::Tensor& a, const torch::Tensor& s);

struct Forward {
  torch::Tensor reads;  // [B, H, R, dv]
  torch::Tensor kappa;  // [B, H, R, S0], kept for the backward
};
Forward forward(const torch::Tensor& x, const torch::Tensor& keys, int64_t S0, const torch::Tensor& a,
                const torch::Tensor& s);

struct Grads {
  torch::Tensor x, a, s;  // [B, H, R, d], [B, H, S0, dv], s's shape
};
// keys_grad [B, H, N ≥ S0, d] (allocated by the caller, unit last stride): its first S0 rows accumulate
// keys̄ = (κ̄ ⊙ κ)ᵀ (s X).
Grads backward(const torch::Tensor& grad_reads, const torch::Tensor& x, const torch::Tensor& keys, int64_t S0,
               const torch::Tensor& a, const torch::Tensor& s, const torch::Tensor& kappa,
               const torch::Tensor& keys_grad);

}  // namespace mnemo::kernel_read_cpu
