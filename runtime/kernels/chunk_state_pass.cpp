// The inter-chunk state pass of the chunked recurrences (chunking.h chunk_state_scan, chunk_delta_state_scan): the
// eager chunk loop, and the kernel of state_pass_kernel.cuh as one autograd node whose backward is the kernel's
// backward pass plus the batched products it leaves to its caller. CUDA tensors take the kernel in builds that link
// it; CPU tensors run its block code over the host grid inside a StatePassKernelHostScope (the CPU tests' proof).
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/kernels/block_pass.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/state_pass_kernel.h"

namespace mnemo {

namespace chunk_state_pass {

namespace sk = state_pass_kernel;
using grid::data_of;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

grid::KernelForm& state_pass_form() {
  static grid::KernelForm form("state_pass", "chunk state-pass kernel");
  return form;
}

bool present(const Tensor& t) { return t.defined() && t.numel() > 0; }

// Inputs as the kernel reads them: [seqs, N, ...] (seqs = batch rows × heads), contiguous, absent ones empty.
enum Input { kDecay = 0, kW, kU, kB, kIncrements, kInitial };

sk::Dims dims_of(const variable_list& in) {
  const Tensor& s0 = in[kInitial];  // [seqs, R, V], always given
  const bool delta = present(in[kW]);
  return sk::make_dims(s0.size(0), static_cast<int>(in[kDecay].size(1)), delta ? static_cast<int>(in[kW].size(2)) : 0,
                       static_cast<int>(s0.size(1)), static_cast<int>(s0.size(2)));
}

template <class Acc>
sk::ForwardArgs<Acc> forward_args(const sk::Dims& z, const variable_list& in) {
  sk::ForwardArgs<Acc> a{};
  a.z = z;
  a.decay = data_of<Acc>(in[kDecay]);
  a.W = data_of<Acc>(in[kW]), a.U = data_of<Acc>(in[kU]), a.B = data_of<Acc>(in[kB]);
  a.increments = data_of<Acc>(in[kIncrements]);
  a.s0 = data_of<Acc>(in[kInitial]);
  return a;
}

struct PassOutputs {
  Tensor starts, X, final_state;  // X empty in the plain form
};

PassOutputs run_forward(const variable_list& in) {
  const auto z = dims_of(in);
  const auto& s0 = in[kInitial];
  PassOutputs out;
  out.starts = torch::empty({z.seqs, z.N, z.R, z.V}, s0.options());
  out.X = present(in[kW]) ? torch::empty({z.seqs, z.N, z.C, z.V}, s0.options()) : torch::empty({0}, s0.options());
  out.final_state = torch::empty({z.seqs, z.R, z.V}, s0.options());
  grid::with_acc_type(s0, [&](auto zero) {
    using Acc = decltype(zero);
    auto a = forward_args<Acc>(z, in);
    a.starts = data_of<Acc>(out.starts), a.X = data_of<Acc>(out.X), a.final_state = data_of<Acc>(out.final_state);
    state_pass_form().run(s0, a, z.blocks, sk::forward_block<Acc>, MNEMO_DEVICE_LAUNCHER(sk::launch), "forward");
  });
  return out;
}

Tensor adjoint_or_empty(const Tensor& g, const Tensor& like) {
  return g.defined() ? g.to(like.scalar_type()).contiguous() : torch::empty({0}, like.options());
}

struct StatePassFn : torch::autograd::Function<StatePassFn> {
  // Returns {starts, X, final_state} (delta form) or {starts, final_state}.
  static variable_list forward(AutogradContext* ctx, const Tensor& decay, const Tensor& W, const Tensor& U,
                               const Tensor& B, const Tensor& increments, const Tensor& s0) {
    const variable_list in = {decay, W, U, B, increments, s0};
    auto out = run_forward(in);
    const bool delta = present(W);
    ctx->saved_data["delta"] = delta;
    ctx->saved_data["increments"] = present(increments);
    ctx->save_for_backward({decay, W, B, out.starts, out.X});
    if (delta) return {out.starts, out.X, out.final_state};
    return {out.starts, out.final_state};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const auto sv = ctx->get_saved_variables();
    const Tensor &decay = sv[0], &W = sv[1], &B = sv[2], &starts = sv[3], &X = sv[4];
    const bool delta = ctx->saved_data["delta"].toBool();
    const Tensor empty = torch::empty({0}, starts.options());
    const int64_t seqs = starts.size(0), R = starts.size(2), V = starts.size(3);
    // U, the increments and s0 are not read by the backward.
    const variable_list in = {decay, W, empty, B, empty, empty};
    const auto z = sk::make_dims(seqs, static_cast<int>(starts.size(1)), delta ? static_cast<int>(X.size(2)) : 0,
                                 static_cast<int>(R), static_cast<int>(V));
    const Tensor d_starts = adjoint_or_empty(go[0], starts);
    const Tensor d_X = delta ? adjoint_or_empty(go[1], starts) : empty;
    const Tensor d_final = adjoint_or_empty(go.back(), starts);
    Tensor d_after = torch::empty_like(starts);
    Tensor d_U = delta ? torch::empty_like(X) : empty;
    Tensor d_s0 = torch::empty({seqs, R, V}, starts.options());
    grid::with_acc_type(starts, [&](auto zero) {
      using Acc = decltype(zero);
      sk::BackwardArgs<Acc> a{};
      a.x = forward_args<Acc>(z, in);
      a.d_starts = data_of<Acc>(d_starts), a.d_X = data_of<Acc>(d_X), a.d_final = data_of<Acc>(d_final);
      a.d_after = data_of<Acc>(d_after), a.d_U = data_of<Acc>(d_U), a.d_s0 = data_of<Acc>(d_s0);
      state_pass_form().run(starts, a, z.blocks, sk::backward_block<Acc>, MNEMO_DEVICE_LAUNCHER(sk::launch),
                            "backward");
    });
    // The batched rest (state_pass_kernel.cuh): d̄_n = rowsum(S_n ⊙ Ā_n), Ē_n = Ā_n, W̄_n = −Y_n S_nᵀ, B̄_n = X_n Ā_nᵀ.
    const Tensor d_decay = (starts * d_after).sum(-1);
    Tensor d_W, d_B;
    if (delta) {
      d_W = -torch::matmul(d_U, starts.transpose(-1, -2));
      d_B = torch::matmul(X, d_after.transpose(-1, -2));
    }
    const Tensor d_increments = ctx->saved_data["increments"].toBool() ? d_after : Tensor();
    return {d_decay, d_W, delta ? d_U : Tensor(), d_B, d_increments, d_s0};
  }
};

// [B, H, N, ...] -> [B·H, N, ...] contiguous in `dtype` (a differentiable reshape); undefined -> empty.
Tensor as_sequences(const Tensor& t, torch::ScalarType dtype, int64_t drop_trailing = 0) {
  if (!t.defined()) return torch::empty({0}, torch::TensorOptions().dtype(dtype));
  auto shape = t.sizes().vec();
  std::vector<int64_t> flat = {shape[0] * shape[1]};
  flat.insert(flat.end(), shape.begin() + 2, shape.end() - drop_trailing);
  return t.to(dtype).reshape(flat).contiguous();
}

std::vector<int64_t> with_batch(const Tensor& like, std::vector<int64_t> rest) {
  rest.insert(rest.begin(), {like.size(0), like.size(1)});
  return rest;
}

// Whether the kernel takes this pass: a route (state_pass_kernel_route), fp32 or fp64 states of [B, H, N, R, V]
// increments or U, and a decay per state row ([B, H, N, R | 1, 1]).
bool kernel_takes(const Tensor& like, const Tensor& decay, int64_t R) {
  if (!state_pass_kernel_route(like)) return false;
  const auto t = like.scalar_type();
  if (t != torch::kFloat32 && t != torch::kFloat64) return false;
  if (like.dim() != 5 || decay.dim() != 5 || decay.size(-1) != 1) return false;
  return decay.size(-2) == 1 || decay.size(-2) == R;
}

}  // namespace chunk_state_pass

using namespace chunk_state_pass;

bool state_pass_kernel_on_host() { return state_pass_form().on_host(); }
void set_state_pass_kernel_on_host(bool on) { state_pass_form().set_on_host(on); }
int64_t state_pass_kernel_passes() { return state_pass_form().passes(); }

bool state_pass_kernel_route(const torch::Tensor& like) {
  if (!like.defined()) return false;
  if (like.is_cuda()) return grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the eager loop
  return like.device().is_cpu() && state_pass_kernel_on_host();
}

namespace {

// The kernel on [B, H, N, ...] tensors: the rows' decay [B, H, N, R] expanded from [B, H, N, R | 1, 1]; returns
// starts, X (delta form) and the final state in the callers' layout.
variable_list run_state_pass(const torch::Tensor& decay, const torch::Tensor& W, const torch::Tensor& U,
                             const torch::Tensor& B, const torch::Tensor& increments, const torch::Tensor& initial,
                             const torch::Tensor& like, int64_t R, int64_t V) {
  const auto dt = like.scalar_type();
  const int64_t N = like.size(2);
  const auto rows = decay.expand({like.size(0), like.size(1), N, R, 1});
  variable_list in = {as_sequences(rows, dt, 1), as_sequences(W, dt), as_sequences(U, dt), as_sequences(B, dt),
                      as_sequences(increments, dt), initial.to(dt).reshape({-1, R, V}).contiguous()};
  for (auto& t : in)
    if (!t.defined() || t.numel() == 0) t = torch::empty({0}, like.options());
  if (torch::GradMode::is_enabled())
    return StatePassFn::apply(in[kDecay], in[kW], in[kU], in[kB], in[kIncrements], in[kInitial]);
  auto out = run_forward(in);
  if (present(W)) return {out.starts, out.X, out.final_state};
  return {out.starts, out.final_state};
}

}  // namespace

ChunkStateScan chunk_state_scan(const torch::Tensor& decay, const torch::Tensor& increments, torch::Tensor initial) {
  const int64_t N = increments.size(2);
  if (increments.dim() == 5 && kernel_takes(increments, decay, increments.size(3))) {
    const int64_t R = increments.size(3), V = increments.size(4);
    auto out = run_state_pass(decay, {}, {}, {}, increments, initial, increments, R, V);
    return {out[0].view(with_batch(increments, {N, R, V})), out[1].view(with_batch(increments, {R, V}))};
  }
  std::vector<torch::Tensor> starts;
  starts.reserve(N);
  // unbind, not select(n) in the loop: the backward of N selects writes N full-size zero tensors (O(N²) traffic,
  // most of a 340M Gated DeltaNet step on the GPU by the profiler), unbind's stacks the N gradients once.
  const auto decay_n = decay.unbind(2), increment_n = increments.unbind(2);
  torch::Tensor S = std::move(initial);
  for (int64_t n = 0; n < N; ++n) {
    starts.push_back(S);
    S = decay_n[n] * S + increment_n[n];
  }
  return {torch::stack(starts, 2), S};
}

ChunkDeltaStateScan chunk_delta_state_scan(const torch::Tensor& W, const torch::Tensor& U, const torch::Tensor& B,
                                           const torch::Tensor& row_decay, const torch::Tensor& increments,
                                           torch::Tensor initial) {
  const int64_t N = U.size(2), C = U.size(3), V = U.size(4), R = W.size(4);
  if (kernel_takes(U, row_decay, R)) {
    auto out = run_state_pass(row_decay, W, U, B, increments, initial, U, R, V);
    return {out[0].view(with_batch(U, {N, R, V})), out[1].view(with_batch(U, {N, C, V})),
            out[2].view(with_batch(U, {R, V}))};
  }
  std::vector<torch::Tensor> starts, corrected;
  starts.reserve(N);
  corrected.reserve(N);
  const auto W_n = W.unbind(2), U_n = U.unbind(2), B_n = B.unbind(2), decay_n = row_decay.unbind(2);
  std::vector<torch::Tensor> increment_n;
  if (increments.defined()) increment_n = increments.unbind(2);
  torch::Tensor S = std::move(initial);
  for (int64_t n = 0; n < N; ++n) {
    starts.push_back(S);
    auto X = U_n[n] - chunk_matmul(W_n[n], S);  // X_n = U_n − W_n S_n
    S = S * decay_n[n] + chunk_matmul(B_n[n].transpose(-1, -2), X);
    if (increments.defined()) S = S + increment_n[n];
    corrected.push_back(std::move(X));
  }
  return {torch::stack(starts, 2), torch::stack(corrected, 2), S};
}

}  // namespace mnemo
