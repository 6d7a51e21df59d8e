// The layer kernels (fused_layers.cuh) as autograd nodes (fused_layers.h): CUDA tensors go to the CUDA launchers,
// CPU tensors run the block code over the host grid.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/common.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_layers.cuh"
#include "runtime/kernels/fused_layers.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/kernels/precision.h"

#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>

#include "core/torch_compat.h"
#define MNEMO_LAYERS_CUDA 1
#else
#define MNEMO_LAYERS_CUDA 0
#endif

namespace mnemo {

// Named (not anonymous): a unity build puts this file in one translation unit with other kernels' nodes.
namespace fused_layers_node {

namespace lk = layers_kernel;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<int>& cuda_switch() {
  static std::atomic<int> on{[] {
    const char* v = std::getenv("MNEMO_FUSED_CUDA");
    return v && std::strcmp(v, "0") == 0 ? 0 : 1;
  }()};
  return on;
}

lk::Element element_of(const torch::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return lk::Element::kFloat32;
    case torch::kFloat64: return lk::Element::kFloat64;
    case torch::kBFloat16: return lk::Element::kBFloat16;
    default:
      throw Error(std::string(op) + ": float32, float64 or bfloat16 expected, got " +
                  std::string(c10::toString(t.scalar_type())));
  }
}

torch::ScalarType acc_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

void* data(const torch::Tensor& t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }

// Runs a kernel: on a CUDA tensor `device(stream)` (a launcher call) on its stream, on the CPU
// `block(E{}, Acc{}, block_index, shared, lanes)` (the block function) over the host grid of `blocks` blocks, with
// RMSNorm's shared memory when `row_sums`.
template <class Device, class Block>
void run(const torch::Tensor& like, lk::Element element, int64_t blocks, bool row_sums, Device&& device,
         Block&& block) {
  if (like.is_cuda()) {
#if MNEMO_LAYERS_CUDA
    const c10::cuda::CUDAGuard guard(like.device());
    device(torch_compat::current_cuda_stream(like.device()));
    return;
#else
    throw Error("fused layer kernels: this build has no CUDA kernels");
#endif
  }
  auto host = [&](auto e, auto acc) {
    using Acc = decltype(acc);
    const std::size_t bytes = row_sums ? lk::rms_norm_shared_bytes<Acc>(grid::host_lanes().count) : 16;
    grid::run_on_host(blocks, bytes,
                      [&](int64_t b, void* shared, grid::Lanes lanes) { block(e, acc, b, shared, lanes); });
  };
  switch (element) {
    case lk::Element::kFloat32: host(float{}, float{}); break;
    case lk::Element::kFloat64: host(double{}, double{}); break;
    case lk::Element::kBFloat16: host(grid::bf16{}, float{}); break;
  }
}

// The rows of x [..., D]; about 1024 blocks, each a whole number of rows (the dw partials are [blocks, D]).
lk::RowProblem row_problem(const torch::Tensor& x, double eps) {
  lk::RowProblem p;
  p.dim = x.size(-1);
  p.rows = p.dim == 0 ? 0 : x.numel() / p.dim;
  p.rows_per_block = std::max<int64_t>(1, (p.rows + 1023) / 1024);
  p.eps = eps;
  return p;
}

torch::Tensor rms_norm_eager(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(recurrence_dtype(x));
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps) * w).to(x.scalar_type());
}

class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in, double eps) {
    const auto x = x_in.contiguous(), w = w_in.contiguous();
    const lk::Element element = element_of(x, "rms_norm");
    const lk::RowProblem p = row_problem(x, eps);
    auto y = torch::empty_like(x);
    auto rstd = torch::empty({p.rows}, x.options().dtype(acc_dtype(x)));
    lk::RmsNormForward ptr;
    ptr.x = data(x);
    ptr.w = data(w);
    ptr.y = data(y);
    ptr.rstd = data(rstd);
    run(x, element, lk::row_blocks(p), true, [&](void* stream) { lk::launch_rms_norm_forward(p, ptr, element, stream); },
        [&](auto e, auto acc, int64_t b, void* shared, grid::Lanes lanes) {
          lk::rms_norm_forward_block<decltype(e), decltype(acc)>(p, ptr, b, shared, lanes);
        });
    ctx->save_for_backward({x_in, w_in, x, rstd});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate the eager formula
      auto g = fused_cpu::reference_backward(
          [&](const std::vector<torch::Tensor>& in) { return rms_norm_eager(in[0], in[1], eps); }, {saved[0], saved[1]},
          grads[0]);
      return {g[0], g[1], torch::Tensor()};
    }
    const auto &x = saved[2], &rstd = saved[3];
    const auto w = saved[1].contiguous();
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    const lk::Element element = element_of(x, "rms_norm");
    const lk::RowProblem p = row_problem(x, eps);
    torch::Tensor dx, dw_partial;
    if (ctx->needs_input_grad(0)) dx = torch::empty_like(x);
    if (ctx->needs_input_grad(1)) dw_partial = torch::empty({lk::row_blocks(p), p.dim}, x.options().dtype(acc_dtype(x)));
    lk::RmsNormBackward ptr;
    ptr.x = data(x);
    ptr.w = data(w);
    ptr.rstd = data(rstd);
    ptr.dy = data(dy);
    ptr.dx = data(dx);
    ptr.dw_partial = data(dw_partial);
    run(x, element, lk::row_blocks(p), true, [&](void* stream) { lk::launch_rms_norm_backward(p, ptr, element, stream); },
        [&](auto e, auto acc, int64_t b, void* shared, grid::Lanes lanes) {
          lk::rms_norm_backward_block<decltype(e), decltype(acc)>(p, ptr, b, shared, lanes);
        });
    torch::Tensor dw;
    if (dw_partial.defined()) dw = dw_partial.sum(0).to(w.scalar_type());
    return {dx, dw, torch::Tensor()};
  }
};

torch::Tensor swiglu_eager(const torch::Tensor& g, const torch::Tensor& u) { return torch::silu(g) * u; }

lk::GateProblem gate_problem(const torch::Tensor& g) {
  lk::GateProblem p;
  p.inner = g.dim() == 0 ? 1 : g.size(-1);
  p.rows = p.inner == 0 ? 0 : g.numel() / p.inner;
  return p;
}

class SwigluGateFn : public torch::autograd::Function<SwigluGateFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& g_in, const torch::Tensor& u_in) {
    const auto g = g_in.contiguous(), u = u_in.contiguous();
    const lk::Element element = element_of(g, "swiglu_gate");
    const lk::GateProblem p = gate_problem(g);
    auto h = torch::empty_like(g);
    lk::GatePointers ptr;
    ptr.g = data(g);
    ptr.u = data(u);
    ptr.h = data(h);
    run(g, element, lk::gate_blocks(p), false,
        [&](void* stream) { lk::launch_swiglu_gate_forward(p, ptr, element, stream); },
        [&](auto e, auto acc, int64_t b, void* shared, grid::Lanes lanes) {
          lk::swiglu_gate_forward_block<decltype(e), decltype(acc)>(p, ptr, b, shared, lanes);
        });
    ctx->save_for_backward({g_in, u_in, g, u});
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (torch::GradMode::is_enabled())
      return fused_cpu::reference_backward(
          [](const std::vector<torch::Tensor>& in) { return swiglu_eager(in[0], in[1]); }, {saved[0], saved[1]},
          grads[0]);
    const auto &g = saved[2], &u = saved[3];
    const auto dh = grads[0].to(g.scalar_type()).contiguous();
    const lk::Element element = element_of(g, "swiglu_gate");
    const lk::GateProblem p = gate_problem(g);
    auto dg = torch::empty_like(g), du = torch::empty_like(u);
    lk::GatePointers ptr;
    ptr.g = data(g);
    ptr.u = data(u);
    ptr.dh = data(dh);
    ptr.dg = data(dg);
    ptr.du = data(du);
    run(g, element, lk::gate_blocks(p), false,
        [&](void* stream) { lk::launch_swiglu_gate_backward(p, ptr, element, stream); },
        [&](auto e, auto acc, int64_t b, void* shared, grid::Lanes lanes) {
          lk::swiglu_gate_backward_block<decltype(e), decltype(acc)>(p, ptr, b, shared, lanes);
        });
    return {dg, du};
  }
};

// y = rope(x) (or its inverse) into a tensor of x's layout.
torch::Tensor rope_apply(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin, bool inverse) {
  const auto x = fused_cpu::unit_last_stride(x_in);
  const lk::Element element = element_of(x, "rope");
  auto y = fused_cpu::empty_like_layout(x);
  lk::RopeProblem p;
  p.batch = x.size(0);
  p.heads = x.size(1);
  p.seq = x.size(2);
  p.dim = x.size(3);
  for (int d = 0; d < 3; ++d) {
    p.x_stride[d] = x.stride(d);
    p.y_stride[d] = y.stride(d);
  }
  p.rows_per_block = std::max<int64_t>(1, 512 / std::max<int64_t>(1, p.dim / 2));
  p.inverse = inverse;
  const auto c = cos.to(acc_dtype(x)).contiguous(), s = sin.to(acc_dtype(x)).contiguous();
  lk::RopePointers ptr;
  ptr.x = data(x);
  ptr.cos = data(c);
  ptr.sin = data(s);
  ptr.y = data(y);
  run(x, element, lk::rope_blocks(p), false, [&](void* stream) { lk::launch_rope(p, ptr, element, stream); },
      [&](auto e, auto acc, int64_t b, void* shared, grid::Lanes lanes) {
        lk::rope_block<decltype(e), decltype(acc)>(p, ptr, b, shared, lanes);
      });
  return y;
}

torch::Tensor rope_eager(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t D = x.size(3), half = D / 2;
  auto xf = x.to(cos.scalar_type());
  auto rotated = torch::cat({-xf.slice(-1, half, D), xf.slice(-1, 0, half)}, -1);
  return (xf * cos + rotated * sin).to(x.scalar_type());
}

class RopeFn : public torch::autograd::Function<RopeFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({x, cos, sin});
    return rope_apply(x, cos, sin, false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (torch::GradMode::is_enabled()) {
      auto g = fused_cpu::reference_backward(
          [&](const std::vector<torch::Tensor>& in) { return rope_eager(in[0], saved[1], saved[2]); }, {saved[0]},
          grads[0]);
      return {g[0], torch::Tensor(), torch::Tensor()};
    }
    return {rope_apply(grads[0].to(saved[0].scalar_type()), saved[1], saved[2], true), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace fused_layers_node

bool fused_layers_kernel_available(const torch::Tensor& like) {
  if (like.is_cuda()) return MNEMO_LAYERS_CUDA == 1;
  return like.device().is_cpu();
}

bool fused_cuda_layers_enabled() { return fused_layers_node::cuda_switch().load(std::memory_order_relaxed) != 0; }
void set_fused_cuda_layers_enabled(bool on) { fused_layers_node::cuda_switch().store(on ? 1 : 0); }

bool fused_layers_eligible(at::ArrayRef<torch::Tensor> tensors) {
  if (MNEMO_LAYERS_CUDA == 0 || !fused_cuda_layers_enabled()) return false;
  c10::optional<torch::ScalarType> dtype;
  c10::optional<torch::Device> device;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!t.is_cuda() || t.is_sparse()) return false;
    const auto st = t.scalar_type();
    if (st != torch::kFloat32 && st != torch::kFloat64 && st != torch::kBFloat16) return false;
    if ((dtype && *dtype != st) || (device && *device != t.device())) return false;
    dtype = st;
    device = t.device();
  }
  return dtype.has_value();
}

torch::Tensor rms_norm_fused_kernel(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (weight.dim() != 1 || weight.size(0) != x.size(-1) || weight.scalar_type() != x.scalar_type())
    throw Error("rms_norm: weight must be [D] of x's dtype");
  return fused_layers_node::RmsNormFn::apply(x, weight, eps);
}

torch::Tensor swiglu_gate_fused_kernel(const torch::Tensor& g, const torch::Tensor& u) {
  if (g.sizes() != u.sizes() || g.scalar_type() != u.scalar_type())
    throw Error("swiglu_gate: g and u must have one shape and dtype");
  return fused_layers_node::SwigluGateFn::apply(g, u);
}

torch::Tensor rope_fused_kernel(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (x.dim() != 4 || x.size(3) % 2 != 0) throw Error("rope: x must be [B, H, T, D] with D even");
  const auto acc = fused_layers_node::acc_dtype(x);
  if (cos.sizes() != torch::IntArrayRef({x.size(2), x.size(3)}) || sin.sizes() != cos.sizes() ||
      cos.scalar_type() != acc || sin.scalar_type() != acc)
    throw Error("rope: cos and sin must be [T, D] in fp32 (fp64 for an fp64 x)");
  return fused_layers_node::RopeFn::apply(x, cos, sin);
}

}  // namespace mnemo
