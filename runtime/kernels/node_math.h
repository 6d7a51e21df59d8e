// Small tensor helpers shared by the hand-written backward nodes (runtime/deep_memory/fused_chunk.cpp,
// runtime/ttt/fused_chunk.cpp, runtime/miras/fused_segment.cpp). Rows are tokens, the last dim a head's channels.
#pragma once
#include <torch/torch.h>

namespace mnemo::node {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline Tensor tr(const Tensor& x) { return x.transpose(-1, -2); }
inline Tensor mean_last(const Tensor& x) { return x.mean(-1, true); }
// [B, H, n, D] -> [1, H, 1, D]: the gradient of a per-head affine parameter.
inline Tensor head_sum(const Tensor& x) { return x.sum(at::IntArrayRef{0, 2}, true); }
// An output's incoming gradient, zeros where autograd passed none (the output was not used).
inline Tensor or_zeros(const Tensor& g, const Tensor& like) { return g.defined() ? g : torch::zeros_like(like); }
// Adjoint of the LayerNorm n = (x - x̄) / r, r = sqrt(var x + eps), given n̄: x̄ = (n̄ - mean n̄ - n mean(n̄ ⊙ n)) / r.
// (The same expression is the gradient of ½||LN(x) ⊙ γ + β - t||² w.r.t. x with n̄ = γ ⊙ residual.)
inline Tensor layer_norm_adjoint(const Tensor& gn, const Tensor& n, const Tensor& r) {
  return (gn - mean_last(gn) - n * mean_last(gn * n)) / r;
}

}  // namespace mnemo::node
