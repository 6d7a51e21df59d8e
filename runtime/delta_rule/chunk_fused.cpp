// The delta-rule chunk kernels (chunk_kernel.cuh: three stages a pass) as one autograd node: on CPU tensors the
// stages' block code runs over a sequential host grid (grid::run_on_host: the CPU build and CI execute the kernel's own decomposition),
// on CUDA tensors the launchers of chunk_kernel.cu run it on the current stream (builds with MNEMO_CUDA_KERNELS).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/torch_compat.h"
#include "runtime/delta_rule/chunk_kernel.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/kernels/precision.h"
#include "runtime/kernels/kernel_counts.h"

namespace mnemo {

// File-local names in a named namespace (unity builds compile this file with others of runtime/).
namespace delta_rule_fused {

namespace dk = delta_rule_kernel;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum Input { Q = 0, K, V, BETA, G, H0, kInputs };

// V columns per block: fla's BV for head dims up to 64 (two blocks per (sequence, head) at V = 128).
constexpr int64_t kDefaultValueTile = 64;

// The kernels' element type: fp64 when any input is (then Acc is fp64 too); bf16 when q, k and v all are, or when
// they are CUDA tensors under the bf16 policy (the mixers' l2norm returns fp32 q and k there, where fla's kernels
// take them in bf16: the tensor-core stages); else fp32.
torch::ScalarType element_dtype(const Tensor& q, const Tensor& k, const Tensor& v, torch::ScalarType acc,
                                bool bf16_policy) {
  if (acc == torch::kFloat64) return torch::kFloat64;
  const bool bf16 = q.scalar_type() == torch::kBFloat16 && k.scalar_type() == torch::kBFloat16 &&
                    v.scalar_type() == torch::kBFloat16;
  return bf16 || (bf16_policy && q.is_cuda()) ? torch::kBFloat16 : torch::kFloat32;
}

// The bf16 policy of a call: a bf16 run's AutocastScope (bf16_products_enabled) or bf16 autocast on CUDA set by the
// caller. Read before the entry turns autocast off for the node (AutocastOff excludes the autocast dispatch keys,
// and autocast then reads as disabled).
bool bf16_policy_of_caller() {
  return bf16_products_enabled() ||
         (torch_compat::autocast_enabled(c10::DeviceType::CUDA) &&
          torch_compat::autocast_dtype(c10::DeviceType::CUDA) == torch::kBFloat16);
}

dk::Dtype kernel_dtype(torch::ScalarType t) {
  return t == torch::kFloat64 ? dk::Dtype::f64 : t == torch::kBFloat16 ? dk::Dtype::bf16 : dk::Dtype::f32;
}

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// What both passes share: packed sizes and the int32 offsets (on the tensors' device, and on the host for the
// host grid and the chunk count).
struct Packing {
  dk::Problem p{};
  Tensor cu_seqlens, chunk_offsets;  // int32, on the inputs' device
  int64_t chunks = 0;
};

// The V tile when none is asked for: kDefaultValueTile, halved (down to 16 columns) while a stage's tiles pass the
// shared memory of a block. The tensor-core stages of bf16 inputs keep an fp32 and a bf16 copy of the state tile:
// at K = 128 and C = 64 the backward's state stage fits with 32 columns (80 KiB), not with 64 (120 KiB).
int default_value_tile(dk::Problem p, dk::Dtype dtype) {
  p.bv = static_cast<int>(std::min<int64_t>(p.value_dim, kDefaultValueTile));
  auto fits = [&] {
    for (dk::Stage s : dk::kForwardStages)
      if (dk::stage_bytes(s, p, dtype) > dk::kMaxSharedBytes) return false;
    for (dk::Stage s : dk::kBackwardStages)
      if (dk::stage_bytes(s, p, dtype) > dk::kMaxSharedBytes) return false;
    return true;
  };
  while (p.bv > 16 && !fits()) p.bv /= 2;
  return p.bv;
}

// MNEMO_DELTA_RULE_VALUE_TILE: the V tile when a call asks for none (0 or unset: default_value_tile). For measuring
// on a device: a smaller tile gives the sequential state stages more blocks (sequences × heads × V tiles) at the
// cost of more K-side work in the others; scripts/gpu-check's tiles step times 16, 32 and 64.
int64_t value_tile_from_environment() {
  const char* v = std::getenv("MNEMO_DELTA_RULE_VALUE_TILE");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 4096)
    throw Error(std::string("MNEMO_DELTA_RULE_VALUE_TILE: need a V tile in columns (0 for the default), got '") + v +
                "'");
  return static_cast<int64_t>(n);
}

Packing make_packing(const Tensor& q, const Tensor& v, const Tensor& cu_host, double scale, int64_t chunk,
                     int64_t value_tile, dk::Dtype dtype) {
  Packing pk;
  const int64_t H = q.size(2), Kd = q.size(3), Vd = v.size(3);
  const int64_t seqs = cu_host.size(0) - 1;
  auto offsets = torch::zeros({seqs + 1}, torch::kInt32);
  const auto* cu = cu_host.data_ptr<int32_t>();
  auto* off = offsets.data_ptr<int32_t>();
  for (int64_t s = 0; s < seqs; ++s) off[s + 1] = off[s] + static_cast<int32_t>((cu[s + 1] - cu[s] + chunk - 1) / chunk);
  pk.chunks = off[seqs];
  pk.p.num_chunks = static_cast<int>(pk.chunks);
  // Sequences of one length (a plain batch): the offsets made on the device by arange, so that a step with no
  // host-to-device copy can be captured as a CUDA graph (engine/training/cuda_graph.h); packed ragged sequences
  // copy theirs.
  const int64_t len = seqs > 0 ? cu[1] - cu[0] : 0;
  bool uniform = true;
  for (int64_t s = 0; s <= seqs && uniform; ++s) uniform = cu[s] == s * len;
  if (uniform) {
    const auto ints = torch::TensorOptions().dtype(torch::kInt32).device(q.device());
    pk.cu_seqlens = torch::arange(seqs + 1, ints).mul_(static_cast<int32_t>(len));
    pk.chunk_offsets = torch::arange(seqs + 1, ints).mul_(static_cast<int32_t>((len + chunk - 1) / chunk));
  } else {
    pk.cu_seqlens = cu_host.to(q.device());
    pk.chunk_offsets = offsets.to(q.device());
  }
  pk.p.num_seqs = static_cast<int>(seqs);
  pk.p.heads = static_cast<int>(H);
  pk.p.key_dim = static_cast<int>(Kd);
  pk.p.value_dim = static_cast<int>(Vd);
  pk.p.chunk = static_cast<int>(chunk);
  if (value_tile == 0) value_tile = value_tile_from_environment();
  pk.p.bv = value_tile > 0 ? static_cast<int>(std::min<int64_t>(Vd, value_tile)) : default_value_tile(pk.p, dtype);
  pk.p.scale = scale;
  pk.p.cu_seqlens = pk.cu_seqlens.data_ptr<int32_t>();
  pk.p.chunk_offsets = pk.chunk_offsets.data_ptr<int32_t>();
  return pk;
}

// One stage's block function over a sequential host grid.
template <class T, class Acc, class Args, class BlockFn>
void stage_on_host(dk::Stage stage, const Args& a, BlockFn block_fn) {
  grid::run_on_host(dk::stage_blocks(stage, a.p), dk::stage_bytes<T, Acc>(stage, a.p),
                    [&](int64_t block, void* shared, grid::Lanes lanes) { block_fn(a, block, shared, lanes); });
}

// The stages of each pass over a sequential host grid, in the launch's element types and the device's order.
void forward_on_host(const dk::ForwardLaunch& l) {
  dk::with_types(l.dtype, [&](auto types) {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    const auto a = dk::typed_args<T, Acc>(l);
    stage_on_host<T, Acc>(dk::Stage::prepare, a, dk::prepare_block<T, Acc>);
    stage_on_host<T, Acc>(dk::Stage::state_forward, a, dk::state_forward_block<T, Acc>);
    if (l.o) stage_on_host<T, Acc>(dk::Stage::output, a, dk::output_block<T, Acc>);
  });
}

void backward_on_host(const dk::BackwardLaunch& l) {
  dk::with_types(l.dtype, [&](auto types) {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    const auto a = dk::typed_args<T, Acc>(l);
    stage_on_host<T, Acc>(dk::Stage::local_backward, a, dk::local_backward_block<T, Acc>);
    stage_on_host<T, Acc>(dk::Stage::state_backward, a, dk::state_backward_block<T, Acc>);
    stage_on_host<T, Acc>(dk::Stage::gradients, a, dk::gradient_block<T, Acc>);
  });
}

#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
// Workspace for the stages whose tiles pass the device's shared memory (empty when all fit).
Tensor device_workspace(std::size_t bytes, const Tensor& like) {
  return bytes == 0 ? Tensor() : torch::empty({static_cast<int64_t>(bytes)}, like.options().dtype(torch::kUInt8));
}
#endif

void run_forward(const dk::ForwardLaunch& l, const Tensor& like) {
  // `like` is the packed q, in the kernels' element type.
  count_kernel_pass(l.o ? "delta_rule forward" : "delta_rule recompute", like,
                    products_label(like.scalar_type(), false));
  if (like.is_cuda()) {
#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
    auto ws = device_workspace(dk::workspace_bytes(dk::kForwardStages, l.p, l.dtype), like);
    if (const char* err = dk::launch_forward(l, ws.defined() ? ws.data_ptr() : nullptr,
                                             torch_compat::current_cuda_stream(like.device())))
      throw Error(std::string("delta rule fused forward: ") + err);
    return;
#else
    throw Error("delta rule fused kernel: this build has no CUDA kernels (nvcc was not found at configure time)");
#endif
  }
  forward_on_host(l);
}

void run_backward(const dk::BackwardLaunch& l, const Tensor& like) {
  count_kernel_pass("delta_rule backward", like, products_label(like.scalar_type(), false));
  if (like.is_cuda()) {
#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
    auto ws = device_workspace(dk::workspace_bytes(dk::kBackwardStages, l.p, l.dtype), like);
    if (const char* err = dk::launch_backward(l, ws.defined() ? ws.data_ptr() : nullptr,
                                              torch_compat::current_cuda_stream(like.device())))
      throw Error(std::string("delta rule fused backward: ") + err);
    return;
#else
    throw Error("delta rule fused kernel: this build has no CUDA kernels (nvcc was not found at configure time)");
#endif
  }
  backward_on_host(l);
}

// Inputs [B, T, H, D] -> packed contiguous rows [B·T, H, D] in dtype `dt`.
Tensor packed(const Tensor& t, torch::ScalarType dt) {
  return t.to(dt).contiguous().reshape({t.size(0) * t.size(1), t.size(2), -1});
}

struct DeltaRuleChunkFn : torch::autograd::Function<DeltaRuleChunkFn> {
  // inputs: q, k, v, beta, g, h0 (g and h0 empty placeholders unless gated / has_h0); cu_host: int32 CPU offsets.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, Tensor cu_host, double scale,
                               int64_t chunk, int64_t value_tile, bool gated, bool has_h0, bool bf16_policy) {
    variable_list in(inputs.begin(), inputs.end());
    if (!gated) in[G] = Tensor();
    if (!has_h0) in[H0] = Tensor();
    const auto acc = recurrence_dtype({in[Q], in[K], in[V], in[BETA], in[G], in[H0]});
    const auto el = element_dtype(in[Q], in[K], in[V], acc, bf16_policy);
    const int64_t B = in[Q].size(0), T = in[Q].size(1), H = in[Q].size(2), Vd = in[V].size(3);
    auto pk = make_packing(in[Q], in[V], cu_host, scale, chunk, value_tile, kernel_dtype(el));
    auto q = packed(in[Q], el), k = packed(in[K], el), v = packed(in[V], el);
    auto beta = in[BETA].to(acc).contiguous(), g = in[G].defined() ? in[G].to(acc).contiguous() : Tensor();
    auto h0 = in[H0].defined() ? in[H0].to(acc).contiguous() : Tensor();
    const auto acc_opts = q.options().dtype(acc);
    auto o = torch::empty({B * T, H, Vd}, q.options());
    auto h = torch::empty({pk.chunks, H, pk.p.key_dim, Vd}, acc_opts);
    auto ht = torch::empty({pk.p.num_seqs, H, pk.p.key_dim, Vd}, acc_opts);
    auto linv = torch::empty({pk.chunks, H, chunk, chunk}, acc_opts);
    auto u = torch::empty({B * T, H, Vd}, acc_opts);
    dk::ForwardLaunch l{pk.p, kernel_dtype(el), q.data_ptr(), k.data_ptr(), v.data_ptr(), beta.data_ptr(),
                        ptr_or_null(g), ptr_or_null(h0), o.data_ptr(), h.data_ptr(), ht.data_ptr(),
                        linv.data_ptr(), u.data_ptr()};
    run_forward(l, q);
    // Saved: the inputs only. The backward recomputes the chunk-start states, L⁻¹ and U' (the forward's first two
    // stages, as fla recomputes h): the states alone are chunks × H × K × V floats a layer.
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["value_tile"] = value_tile;
    ctx->saved_data["cu_host"] = cu_host;
    ctx->saved_data["gated"] = gated;
    ctx->saved_data["has_h0"] = has_h0;
    ctx->save_for_backward({q, k, v, beta, gated ? g : inputs[G], has_h0 ? h0 : inputs[H0], in[Q], in[K], in[V],
                            in[BETA], inputs[G], inputs[H0]});
    return {o.reshape({B, T, H, Vd}).to(in[V].scalar_type()), ht};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const Tensor cu_host = ctx->saved_data["cu_host"].toTensor();
    const bool gated = ctx->saved_data["gated"].toBool(), has_h0 = ctx->saved_data["has_h0"].toBool();
    const auto sv = ctx->get_saved_variables();
    const Tensor &q = sv[0], &k = sv[1], &v = sv[2], &beta = sv[3];
    const Tensor g = gated ? sv[4] : Tensor(), h0 = has_h0 ? sv[5] : Tensor();
    const Tensor &q_in = sv[6], &k_in = sv[7], &v_in = sv[8], &beta_in = sv[9], &g_in = sv[10], &h0_in = sv[11];
    const auto acc = beta.scalar_type();
    const int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2), Kd = q_in.size(3), Vd = v_in.size(3);
    auto pk = make_packing(q_in, v_in, cu_host, scale, chunk, ctx->saved_data["value_tile"].toInt(),
                           kernel_dtype(q.scalar_type()));
    const int64_t tiles = pk.p.value_tiles(), rows = B * T;
    // The forward's prepare and state stages again: h, L⁻¹ and U' (no output).
    const auto state_opts = q.options().dtype(acc);
    auto h = torch::empty({pk.chunks, H, Kd, Vd}, state_opts), ht = torch::empty({pk.p.num_seqs, H, Kd, Vd}, state_opts);
    auto linv = torch::empty({pk.chunks, H, chunk, chunk}, state_opts), u = torch::empty({rows, H, Vd}, state_opts);
    run_forward(dk::ForwardLaunch{pk.p, kernel_dtype(q.scalar_type()), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                  beta.data_ptr(), ptr_or_null(g), ptr_or_null(h0), nullptr, h.data_ptr(),
                                  ht.data_ptr(), linv.data_ptr(), u.data_ptr()},
                q);
    auto dout = go[0].defined() ? go[0].to(q.scalar_type()).contiguous().reshape({rows, H, Vd})
                                : torch::zeros({rows, H, Vd}, q.options());
    auto dht = go[1].defined() ? go[1].to(acc).contiguous() : Tensor();
    const auto acc_opts = q.options().dtype(acc);
    auto dq = torch::empty({tiles, rows, H, Kd}, acc_opts), dkk = torch::empty({tiles, rows, H, Kd}, acc_opts);
    auto dv = torch::empty({rows, H, Vd}, acc_opts);
    auto dbeta = torch::empty({tiles, rows, H}, acc_opts);
    auto dg = gated ? torch::empty({tiles, rows, H}, acc_opts) : Tensor();
    auto dh0 = torch::empty({pk.p.num_seqs, H, Kd, Vd}, acc_opts);
    auto dh = torch::empty({pk.chunks, H, Kd, Vd}, acc_opts), dr = torch::empty({rows, H, Vd}, acc_opts);
    dk::BackwardLaunch l{pk.p, kernel_dtype(q.scalar_type()), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                         dout.data_ptr(), beta.data_ptr(), ptr_or_null(g), h.data_ptr(), linv.data_ptr(),
                         u.data_ptr(), ptr_or_null(dht), dh.data_ptr(), dr.data_ptr(), dq.data_ptr(),
                         dkk.data_ptr(), dv.data_ptr(), dbeta.data_ptr(), dg.defined() ? dg.data_ptr() : nullptr,
                         dh0.data_ptr()};
    run_backward(l, q);
    variable_list grads(kInputs + 7);  // + cu_host, scale, chunk, value_tile, gated, has_h0, bf16_policy
    grads[Q] = dq.sum(0).reshape({B, T, H, Kd}).to(q_in.scalar_type());
    grads[K] = dkk.sum(0).reshape({B, T, H, Kd}).to(k_in.scalar_type());
    grads[V] = dv.reshape({B, T, H, Vd}).to(v_in.scalar_type());
    grads[BETA] = dbeta.sum(0).reshape({B, T, H}).to(beta_in.scalar_type());
    if (gated) grads[G] = dg.sum(0).reshape({B, T, H}).to(g_in.scalar_type());
    if (has_h0) grads[H0] = dh0.to(h0_in.scalar_type());
    return grads;
  }
};

}  // namespace delta_rule_fused

DeltaRuleResult delta_rule_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& beta, const torch::Tensor& g,
                                       const torch::Tensor& initial_state, double scale, int64_t chunk_size,
                                       const torch::Tensor& cu_seqlens, int64_t value_tile) {
  const bool varlen = cu_seqlens.defined();
  check_delta_rule_inputs(q, k, v, beta, g, varlen ? torch::Tensor() : initial_state);
  if (chunk_size < 1) throw Error("delta rule: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  if (value_tile < 0) throw Error("delta rule: value_tile must be >= 0 (0 = default), got " + std::to_string(value_tile));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), Kd = q.size(3), Vd = v.size(3);
  torch::Tensor cu_host;
  if (varlen) {
    if (B != 1) throw Error("delta rule: cu_seqlens needs a packed batch (B = 1), got B = " + std::to_string(B));
    if (cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2)
      throw Error("delta rule: cu_seqlens must be 1-D with at least 2 offsets, got " + c10::str(cu_seqlens.sizes()));
    cu_host = cu_seqlens.to(torch::kCPU).to(torch::kInt64);
    const auto* cu = cu_host.data_ptr<int64_t>();
    const int64_t n = cu_host.size(0);
    if (cu[0] != 0 || cu[n - 1] != T)
      throw Error("delta rule: cu_seqlens must run from 0 to T = " + std::to_string(T) + ", got " +
                  std::to_string(cu[0]) + " .. " + std::to_string(cu[n - 1]));
    for (int64_t s = 0; s + 1 < n; ++s)
      if (cu[s + 1] < cu[s]) throw Error("delta rule: cu_seqlens must be non-decreasing, got " + c10::str(cu_host));
    const std::vector<int64_t> state = {n - 1, H, Kd, Vd};
    if (initial_state.defined() && initial_state.sizes() != torch::IntArrayRef(state))
      throw Error("delta rule: with cu_seqlens initial_state must be [sequences, H, K, V] = " +
                  c10::str(torch::IntArrayRef(state)) + ", got " + c10::str(initial_state.sizes()));
    cu_host = cu_host.to(torch::kInt32);
  } else {
    cu_host = (torch::arange(B + 1, torch::kInt64) * T).to(torch::kInt32);
  }
  const bool bf16_policy = delta_rule_fused::bf16_policy_of_caller();
  const AutocastOff autocast_off;  // the kernel's compute dtype is its own (precision rule)
  // An absent g / initial state enters the node as an empty placeholder (LibTorch 1.13 records every input's
  // metadata, which an undefined tensor lacks).
  const auto absent = torch::zeros({0}, q.options());
  const std::vector<torch::Tensor> inputs = {q, k, v, beta, g.defined() ? g : absent, initial_state.defined() ? initial_state : absent};
  auto out = delta_rule_fused::DeltaRuleChunkFn::apply(at::TensorList(inputs), cu_host, scale, chunk_size, value_tile, g.defined(),
                                     initial_state.defined(), bf16_policy);
  return {out[0], out[1]};
}

bool delta_rule_fused_on_device(const torch::Tensor& q) {
#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
  return q.is_cuda();
#else
  (void)q;
  return false;
#endif
}

namespace {
thread_local bool delta_rule_kernel_on_host = false;
}  // namespace

bool delta_rule_fused_route(const torch::Tensor& like) {
  return delta_rule_fused_on_device(like) || (like.device().is_cpu() && delta_rule_kernel_on_host);
}

DeltaRuleKernelHostScope::DeltaRuleKernelHostScope() : previous_(delta_rule_kernel_on_host) {
  delta_rule_kernel_on_host = true;
}
DeltaRuleKernelHostScope::~DeltaRuleKernelHostScope() { delta_rule_kernel_on_host = previous_; }

}  // namespace mnemo
