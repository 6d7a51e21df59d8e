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

// GELU(h), GELU'(h) and φ(h) as plain values (no graph), and GELU''(h) = φ(h)(2 - h²) when with_second.
// Shared by gelu_and_grad and the fused deep-memory chunks (runtime/deep_memory/fused_chunk.cpp, runtime/ttt/,
// runtime/miras/). On the CPU (fp32/fp64, fused_cpu_eligible) one pass over memory (gelu.cpp); fp32's erf there is
// Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, as ATen's vectorised one), fp64's the library erf.
struct GeluValues {
  torch::Tensor value, grad, pdf, second;
};
GeluValues gelu_values(const torch::Tensor& h, bool with_second = false);

namespace detail {
struct GeluSafeFn : torch::autograd::Function<GeluSafeFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    ctx->save_for_backward({h});
    return torch::gelu(h);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list dy) {
    // gelu_values records a graph where one is wanted (create_graph), else is one pass on the CPU (gelu.cpp).
    return {dy[0] * gelu_values(ctx->get_saved_variables()[0]).grad};
  }
};
}  // namespace detail

inline torch::Tensor gelu_safe(const torch::Tensor& h) {
  if (!h.requires_grad() || !torch::GradMode::is_enabled()) return torch::gelu(h);
  return detail::GeluSafeFn::apply(h);
}

// GELU and its derivative at one pre-activation, from one erf and one exp, as one autograd node (the deep
// memories need both at the anchor: the read-out a = GELU(h) and the inner gradient's σ'(h)):
//   Φ = ½(1 + erf(h/√2)),  φ = exp(-h²/2)/√(2π),  a = h Φ,  d = Φ + h φ;
//   backward  h̄ = ā ⊙ d + d̄ ⊙ φ (2 - h²)        (σ''(h) = φ(h)(2 - h²)).
// Written out, its autograd graph had ~20 element-wise nodes per call; this is 1 (saves h, d, φ).
struct GeluAndGrad {
  torch::Tensor value, grad;  // GELU(h), GELU'(h)
};

namespace detail {
struct GeluAndGradFn : torch::autograd::Function<GeluAndGradFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    auto r = gelu_values(h);
    ctx->save_for_backward({h, r.grad, r.pdf});
    ctx->set_materialize_grads(false);
    return {r.value, r.grad};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto s = ctx->get_saved_variables();
    const auto &h = s[0], &d = s[1], &pdf = s[2];
    torch::Tensor dh;
    if (g[0].defined()) dh = g[0] * d;
    if (g[1].defined()) {
      auto second = pdf * (2.0 - h * h);  // σ''(h)
      dh = dh.defined() ? torch::addcmul(dh, g[1], second) : g[1] * second;
    }
    return {dh};
  }
};
}  // namespace detail

inline GeluAndGrad gelu_and_grad(const torch::Tensor& h) {
  if (!h.requires_grad() || !torch::GradMode::is_enabled()) {
    auto g = gelu_values(h);
    return {g.value, g.grad};
  }
  auto r = detail::GeluAndGradFn::apply(h);
  return {r[0], r[1]};
}

}  // namespace mnemo
