// Exact (erf) GELU whose backward is built from element-wise ops: dh = dy ⊙ GELU'(h),
// GELU'(h) = Φ(h) + h φ(h) (differentiable again).
// Why not torch::gelu's own backward: LibTorch 1.13's CPU float kernel aten::gelu_backward returns
// wrong values (uninitialised or zero) when dy is not contiguous while h is — which a matmul's
// backward hands it (∂/∂A of A·Bᵀ is a transposed view). It made ttt_mlp's fp32 chunk-form
// gradients ~1e9..inf (regression tests in tests/test_ttt.cpp). Use gelu_safe wherever a GELU
// output feeds a matmul and gradients are taken.
#pragma once
#include <torch/torch.h>

namespace mnemo {

inline torch::Tensor gelu_exact_grad(const torch::Tensor& h) {
  const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
  return 0.5 * (1.0 + torch::erf(h * inv_sqrt2)) + h * torch::exp(-0.5 * h * h) * inv_sqrt_2pi;
}

namespace detail {
struct GeluSafeFn : torch::autograd::Function<GeluSafeFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    ctx->save_for_backward({h});
    return torch::gelu(h);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list dy) {
    return {dy[0] * gelu_exact_grad(ctx->get_saved_variables()[0])};
  }
};
}  // namespace detail

inline torch::Tensor gelu_safe(const torch::Tensor& h) {
  if (!h.requires_grad() || !torch::GradMode::is_enabled()) return torch::gelu(h);
  return detail::GeluSafeFn::apply(h);
}

}  // namespace mnemo
