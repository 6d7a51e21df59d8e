// The fused gated-linear-attention chunk kernel (chunk_kernel.cuh) as one autograd node: CUDA tensors go to the
// CUDA kernels (builds with MNEMO_CUDA_KERNELS), CPU tensors run the same block code over a sequential host grid
// (grid::run_on_host) — the form the CPU tests check against gla_chunk, gla_recurrent, simple_gla_chunk and
// linear_attn_chunk. The forward keeps every chunk-start state; the backward reads them instead of recomputing.
#include <algorithm>

#include "runtime/gla/chunk_kernel.cuh"
#include "runtime/gla/gla.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/kernels/precision.h"
#include "runtime/kernels/kernel_counts.h"

#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>

#include "core/torch_compat.h"
#define MNEMO_GLA_CUDA 1
#else
#define MNEMO_GLA_CUDA 0
#endif

namespace mnemo {

// Named (not anonymous): a unity build puts this file in one translation unit with other kernels' nodes.
namespace gla_fused {

namespace gk = gla_kernel;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

gk::Element element_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return gk::Element::kFloat32;
    case torch::kFloat64: return gk::Element::kFloat64;
    case torch::kBFloat16: return gk::Element::kBFloat16;
    default:
      throw Error(std::string("gla_chunk_fused: q, k, v must be float32, float64 or bfloat16, got ") +
                  std::string(c10::toString(t.scalar_type())));
  }
}

// An absent optional input (gate, initial state) reaches the node as an empty tensor: LibTorch 1.13's
// Function::apply cannot take undefined inputs.
void* data(const torch::Tensor& t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }
torch::Tensor or_empty(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}

// Host run of a block function over the grid, typed by the element dtype.
template <class Run>
void on_host(gk::Element element, Run&& run) {
  switch (element) {
    case gk::Element::kFloat32: run(float{}, float{}); break;
    case gk::Element::kFloat64: run(double{}, double{}); break;
    case gk::Element::kBFloat16: run(grid::bf16{}, float{}); break;
  }
}

struct Launch {
  gk::Problem problem;
  gk::Element element;
  torch::Tensor cu_seqlens, state_slots;  // int32 on the inputs' device, or undefined
  int64_t slots = 0;
};

void run_forward(const Launch& l, const gk::ForwardPointers& ptr, const torch::Tensor& like) {
  count_kernel_pass(ptr.o ? "gla forward" : "gla recompute", like, products_label(like.scalar_type(), false));
  if (like.is_cuda()) {
#if MNEMO_GLA_CUDA
    const c10::cuda::CUDAGuard guard(like.device());
    gk::launch_forward(l.problem, ptr, l.element, torch_compat::current_cuda_stream(like.device()));
    return;
#endif
  }
  on_host(l.element, [&](auto e, auto acc) {
    using E = decltype(e);
    using Acc = decltype(acc);
    const std::size_t bytes = gk::pass_shared_bytes<E, Acc>(l.problem, false);
    grid::run_on_host(gk::blocks(l.problem), bytes, [&](int64_t block, void* shared, grid::Lanes lanes) {
      gk::state_forward_block<E, Acc>(l.problem, ptr, block, shared, lanes);
    });
    if (!ptr.o) return;  // the backward's recompute: the chunk states only
    grid::run_on_host(gk::chunk_blocks(l.problem), bytes, [&](int64_t block, void* shared, grid::Lanes lanes) {
      gk::output_block<E, Acc>(l.problem, ptr, block, shared, lanes);
    });
  });
}

void run_backward(const Launch& l, const gk::BackwardPointers& ptr, const torch::Tensor& like) {
  count_kernel_pass("gla backward", like, products_label(like.scalar_type(), false));
  if (like.is_cuda()) {
#if MNEMO_GLA_CUDA
    const c10::cuda::CUDAGuard guard(like.device());
    gk::launch_backward(l.problem, ptr, l.element, torch_compat::current_cuda_stream(like.device()));
    return;
#endif
  }
  on_host(l.element, [&](auto e, auto acc) {
    using E = decltype(e);
    using Acc = decltype(acc);
    const std::size_t bytes = gk::pass_shared_bytes<E, Acc>(l.problem, true);
    grid::run_on_host(gk::blocks(l.problem), bytes, [&](int64_t block, void* shared, grid::Lanes lanes) {
      gk::state_backward_block<E, Acc>(l.problem, ptr, block, shared, lanes);
    });
    grid::run_on_host(gk::chunk_blocks(l.problem), bytes, [&](int64_t block, void* shared, grid::Lanes lanes) {
      gk::gradient_block<E, Acc>(l.problem, ptr, block, shared, lanes);
    });
  });
}

// The launch description travels with the autograd node as an IValue capsule.
struct LaunchHolder : torch::CustomClassHolder {
  explicit LaunchHolder(std::shared_ptr<Launch> l) : launch(std::move(l)) {}
  std::shared_ptr<Launch> launch;
};

// Inputs: q, k, v (element dtype), gate, s0 (accumulation dtype or undefined); outputs o, final state.
class GlaChunkFusedFn : public torch::autograd::Function<GlaChunkFusedFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& gate, const torch::Tensor& s0,
                               const std::shared_ptr<Launch>& launch) {
    const Launch& l = *launch;
    const auto acc = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    const auto& p = l.problem;
    const auto state_opts = q.options().dtype(acc);
    auto o = torch::empty(v.sizes(), v.options());
    auto final_state = torch::empty({p.sequences, p.heads, p.key_dim, p.value_dim}, state_opts);
    auto chunk_states = torch::empty({l.slots, p.heads, p.key_dim, p.value_dim}, state_opts);
    gk::ForwardPointers ptr;
    ptr.q = data(q);
    ptr.k = data(k);
    ptr.v = data(v);
    ptr.gate = data(gate);
    ptr.s0 = data(s0);
    ptr.o = data(o);
    ptr.final_state = data(final_state);
    ptr.chunk_states = data(chunk_states);
    run_forward(l, ptr, q);
    // Saved: the inputs only; the backward recomputes the chunk states (the state stage again, as fla recomputes h).
    ctx->save_for_backward({q, k, v, gate, s0});
    ctx->saved_data["launch"] = c10::IValue::make_capsule(c10::make_intrusive<LaunchHolder>(launch));
    ctx->saved_data["has_s0"] = s0.numel() > 0;
    return {o, final_state};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &gate = saved[3], &s0 = saved[4];
    const Launch& l =
        *c10::static_intrusive_pointer_cast<LaunchHolder>(ctx->saved_data["launch"].toCapsule())->launch;
    const auto& p = l.problem;
    const auto acc = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    auto chunk_states = torch::empty({l.slots, p.heads, p.key_dim, p.value_dim}, q.options().dtype(acc));
    {
      auto final_state = torch::empty({p.sequences, p.heads, p.key_dim, p.value_dim}, q.options().dtype(acc));
      gk::ForwardPointers again;
      again.q = data(q);
      again.k = data(k);
      again.v = data(v);
      again.gate = data(gate);
      again.s0 = data(s0);
      again.final_state = data(final_state);
      again.chunk_states = data(chunk_states);
      run_forward(l, again, q);  // o null: the state stage alone
    }
    auto d_o = grads[0].defined() ? grads[0].to(q.scalar_type()).contiguous() : torch::zeros_like(v);
    auto d_final = grads[1].defined() ? grads[1].to(acc).contiguous() : torch::Tensor();
    const int64_t tiles = gk::value_tiles(p), tokens = q.size(0) * q.size(1);
    const auto opts = q.options().dtype(acc);
    auto dq = torch::empty({tiles, tokens, p.heads, p.key_dim}, opts);
    auto dk = torch::empty_like(dq);
    auto dv = torch::empty({tokens, p.heads, p.value_dim}, opts);
    torch::Tensor dgate;
    if (p.gate != gk::Gate::kNone)
      dgate = torch::empty({tiles, tokens, p.heads, p.gate == gk::Gate::kKeyWise ? p.key_dim : 1}, opts);
    auto ds0 = torch::empty({p.sequences, p.heads, p.key_dim, p.value_dim}, opts);
    auto d_states = torch::empty({l.slots, p.heads, p.key_dim, p.value_dim}, opts);
    gk::BackwardPointers ptr;
    ptr.q = data(q);
    ptr.k = data(k);
    ptr.v = data(v);
    ptr.gate = data(gate);
    ptr.chunk_states = data(chunk_states);
    ptr.d_o = data(d_o);
    ptr.d_final_state = data(d_final);
    ptr.dq = data(dq);
    ptr.dk = data(dk);
    ptr.dv = data(dv);
    ptr.dgate = data(dgate);
    ptr.ds0 = data(ds0);
    ptr.d_states = data(d_states);
    run_backward(l, ptr, q);
    auto sum_tiles = [&](const torch::Tensor& t) { return tiles == 1 ? t.select(0, 0) : t.sum(0); };
    variable_list out(6);
    out[0] = sum_tiles(dq).view(q.sizes()).to(q.scalar_type());
    out[1] = sum_tiles(dk).view(k.sizes()).to(k.scalar_type());
    out[2] = dv.view(v.sizes()).to(v.scalar_type());
    if (dgate.defined()) out[3] = sum_tiles(dgate).view(gate.sizes());
    if (ctx->saved_data["has_s0"].toBool()) out[4] = ds0;
    return out;
  }
};

}  // namespace gla_fused

bool gla_fused_kernel_available(const torch::Tensor& like) {
  if (like.is_cuda()) return MNEMO_GLA_CUDA == 1;
  return like.device().is_cpu();
}

GlaChunkRoute gla_chunk_route(const torch::Tensor& like) {
  return like.is_cuda() && gla_fused_kernel_available(like) ? GlaChunkRoute::kFusedKernel : GlaChunkRoute::kEager;
}

RecurrentResult gla_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& gate, GlaGate gate_kind, double scale,
                                const torch::Tensor& initial_state, int64_t chunk_size,
                                const torch::Tensor& cu_seqlens, const GlaFusedTiling& tiling) {
  namespace gk = gla_kernel;
  using gla_fused::GlaChunkFusedFn;
  using gla_fused::Launch;
  const char* op = "gla_chunk_fused";
  check_shape(op, "q", q, {-1, -1, -1, -1});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape(op, "k", k, {B, T, H, K});
  check_shape(op, "v", v, {B, T, H, -1});
  const int64_t V = v.size(3);
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    throw Error(std::string(op) + ": q, k and v must share one dtype");
  if (!gla_fused_kernel_available(q))
    throw Error(std::string(op) + ": no fused kernel for device " + q.device().str() +
                " in this build (CUDA tensors need a build with MNEMO_CUDA_KERNELS)");
  gk::Problem p;
  switch (gate_kind) {
    case GlaGate::kKeyWise: check_shape(op, "gk", gate, {B, T, H, K}); p.gate = gk::Gate::kKeyWise; break;
    case GlaGate::kScalar: check_shape(op, "g", gate, {B, T, H}); p.gate = gk::Gate::kScalar; break;
    case GlaGate::kNone:
      if (gate.defined()) throw Error(std::string(op) + ": a gate tensor was given with GlaGate::kNone");
      p.gate = gk::Gate::kNone;
      break;
  }
  check_chunking(op, T, chunk_size);
  const AutocastOff autocast_off;
  auto launch = std::make_shared<Launch>();
  launch->element = gla_fused::element_of(q);
  const auto acc = recurrence_dtype(q);
  p.heads = H;
  p.key_dim = K;
  p.value_dim = V;
  p.scale = scale;
  if (cu_seqlens.defined()) {
    if (B != 1) throw Error(std::string(op) + ": cu_seqlens needs a packed batch (B = 1), got B = " + std::to_string(B));
    if (cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2 || cu_seqlens.scalar_type() != torch::kInt32)
      throw Error(std::string(op) + ": cu_seqlens must be int32 [sequences + 1]");
    p.sequences = cu_seqlens.size(0) - 1;
    p.seq_len = 0;
  } else {
    p.sequences = B;
    p.seq_len = T;
  }
  if (q.is_cuda()) {
#if MNEMO_GLA_CUDA
    const c10::cuda::CUDAGuard guard(q.device());
    p.tiling = gk::device_tiling(p, launch->element);
#endif
  } else {
    const int chunk = static_cast<int>(std::min<int64_t>(chunk_size, std::max<int64_t>(T, 1)));
    p.tiling.chunk = chunk;
    p.tiling.sub_chunk = static_cast<int>(std::min<int64_t>(tiling.sub_chunk, chunk));
    p.tiling.tile_v = static_cast<int>(tiling.tile_v > 0 ? std::min<int64_t>(tiling.tile_v, V) : std::max<int64_t>(V, 1));
  }
  if (cu_seqlens.defined()) {
    auto host = cu_seqlens.to(torch::kCPU).contiguous();
    const int32_t* cu = host.data_ptr<int32_t>();
    if (cu[0] != 0 || cu[p.sequences] != T)
      throw Error(std::string(op) + ": cu_seqlens must start at 0 and end at T = " + std::to_string(T));
    auto slots = torch::empty({p.sequences + 1}, torch::kInt32);
    int32_t* s = slots.data_ptr<int32_t>();
    s[0] = 0;
    for (int64_t n = 0; n < p.sequences; ++n) {
      if (cu[n + 1] < cu[n]) throw Error(std::string(op) + ": cu_seqlens must be non-decreasing");
      s[n + 1] = s[n] + static_cast<int32_t>(gk::chunks_of(cu[n + 1] - cu[n], p.tiling.chunk) + 1);
    }
    launch->slots = s[p.sequences];
    launch->cu_seqlens = cu_seqlens.to(q.device()).contiguous();
    launch->state_slots = slots.to(q.device());
    p.cu_seqlens = launch->cu_seqlens.data_ptr<int32_t>();
    p.state_slots = launch->state_slots.data_ptr<int32_t>();
  } else {
    launch->slots = B * (gk::chunks_of(T, p.tiling.chunk) + 1);
  }
  if (initial_state.defined()) check_shape(op, "initial_state", initial_state, {p.sequences, H, K, V});
  p.slots = launch->slots;
  launch->problem = p;
  auto gate_acc = gate.defined() ? gate.to(acc).contiguous() : torch::Tensor();
  auto s0 = initial_state.defined() ? initial_state.to(acc).contiguous() : torch::Tensor();
  const auto acc_like = q.options().dtype(acc);
  auto out = GlaChunkFusedFn::apply(q.contiguous(), k.contiguous(), v.contiguous(),
                                    gla_fused::or_empty(gate_acc, torch::empty({0}, acc_like)),
                                    gla_fused::or_empty(s0, torch::empty({0}, acc_like)), launch);
  return {out[0], out[1]};
}

}  // namespace mnemo
