// Mamba's selective scan as one kernel a pass (selective_scan.h selective_scan_kernel): the block code of
// scan_kernel.cuh on CUDA tensors through the launchers of scan_kernel.cu (builds with MNEMO_CUDA_KERNELS), and on CPU
// tensors over a sequential host grid (grid::run_on_host) inside a MambaKernelHostScope, as one autograd node whose
// backward is the kernel's backward pass (tests/test_cuda_kernels_mamba.cpp checks it against the other forms).
#include <string>

#include "core/common.h"
#include "runtime/kernels/block_pass.h"
#include "runtime/kernels/precision.h"
#include "runtime/mamba/scan_kernel.h"
#include "runtime/mamba/selective_scan.h"

namespace mnemo {

namespace selective_scan_kernel_node {

namespace mk = mamba_kernel;
using grid::data_of;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

grid::KernelForm& mamba_kernel_form() {
  static grid::KernelForm form("selective_scan", "mamba selective-scan kernel");
  return form;
}

// Rows of x [B, T, D], or the sequences of cu_seqlens (int32 [S + 1]) packed in x [1, total, D]. An empty
// cu_seqlens or h0 stands for none (autograd's inputs must be defined tensors).
bool is_packed(const Tensor& cu_seqlens) { return cu_seqlens.defined() && cu_seqlens.numel() > 0; }

mk::Dims scan_dims(const Tensor& x, const Tensor& A, int64_t chunk, const Tensor& cu_seqlens) {
  const bool packed = is_packed(cu_seqlens);
  return mk::make_dims(static_cast<int>(packed ? cu_seqlens.size(0) - 1 : x.size(0)), static_cast<int>(x.size(1)),
                       static_cast<int>(x.size(2)), static_cast<int>(A.size(1)), static_cast<int>(chunk), packed);
}

// Inputs x, dt [B, T, D], A [D, N], B, C [B, T, N], h0 [B, D, N] (empty or undefined when packed; contiguous, one
// dtype).
template <class Acc>
mk::ForwardArgs<Acc> scan_args(const mk::Dims& z, const variable_list& in, const Tensor& cu_seqlens) {
  mk::ForwardArgs<Acc> a{};
  a.z = z;
  a.cu_seqlens = is_packed(cu_seqlens) ? cu_seqlens.data_ptr<int32_t>() : nullptr;
  a.x = data_of<Acc>(in[0]), a.dt = data_of<Acc>(in[1]), a.A = data_of<Acc>(in[2]);
  a.Bm = data_of<Acc>(in[3]), a.Cm = data_of<Acc>(in[4]), a.h0 = data_of<Acc>(in[5]);
  return a;
}

struct ScanForward {
  Tensor y, hT, ckpt;  // hT undefined when packed, ckpt when not kept
};

ScanForward scan_forward(const variable_list& in, const mk::Dims& z, const Tensor& cu_seqlens, bool keep_checkpoints) {
  ScanForward f;
  f.y = torch::empty_like(in[0]);
  if (!is_packed(cu_seqlens)) f.hT = torch::empty({z.S, z.D, z.N}, in[0].options());
  if (keep_checkpoints) f.ckpt = torch::empty({z.slots, z.D, z.N}, in[0].options());
  const Tensor work = grid::workspace(mk::forward_work(z), z.blocks, in[0]);
  grid::with_acc_type(in[0], [&](auto zero) {
    using Acc = decltype(zero);
    auto a = scan_args<Acc>(z, in, cu_seqlens);
    a.y = data_of<Acc>(f.y), a.hT = data_of<Acc>(f.hT), a.ckpt = data_of<Acc>(f.ckpt);
    a.work = work.data_ptr<Acc>();
    mamba_kernel_form().run(in[0], a, z.blocks, mk::forward_block<Acc>, MNEMO_DEVICE_LAUNCHER(mk::launch), "forward");
  });
  return f;
}

struct SelectiveScanKernelFn : torch::autograd::Function<SelectiveScanKernelFn> {
  // h0 [B, D, N] (rows) or empty (packed: every sequence from zeros, no final state); cu_seqlens empty (rows).
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& dt, const Tensor& A,
                               const Tensor& Bm, const Tensor& Cm, const Tensor& h0, int64_t chunk,
                               const Tensor& cu_seqlens) {
    const variable_list in = {x, dt, A, Bm, Cm, h0};
    auto f = scan_forward(in, scan_dims(x, A, chunk, cu_seqlens), cu_seqlens, /*keep_checkpoints=*/true);
    ctx->saved_data["chunk"] = chunk;
    ctx->save_for_backward({x, dt, A, Bm, Cm, f.ckpt, cu_seqlens});
    if (!f.hT.defined()) return {f.y};
    return {f.y, f.hT};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const auto sv = ctx->get_saved_variables();
    const variable_list in = {sv[0], sv[1], sv[2], sv[3], sv[4], Tensor()};
    const Tensor &ckpt = sv[5], &cu_seqlens = sv[6];
    const bool packed = is_packed(cu_seqlens);
    const auto z = scan_dims(in[0], in[2], ctx->saved_data["chunk"].toInt(), cu_seqlens);
    const auto opts = in[0].options();
    const Tensor dy = go[0].defined() ? go[0].to(in[0].scalar_type()).contiguous() : torch::zeros_like(in[0]);
    const Tensor dhT = !packed && go.size() > 1 && go[1].defined() ? go[1].to(in[0].scalar_type()).contiguous()
                                                                   : Tensor();
    Tensor dx = torch::empty_like(in[0]), ddt = torch::empty_like(in[1]);
    Tensor dh0 = packed ? Tensor() : torch::empty({z.S, z.D, z.N}, opts);
    Tensor dA_seqs = torch::empty({z.S, z.D, z.N}, opts);
    Tensor dB_tiles = torch::empty({z.tiles, in[0].size(0), in[0].size(1), z.N}, opts);
    Tensor dC_tiles = torch::empty_like(dB_tiles);
    const Tensor work = grid::workspace(mk::backward_work(z), z.blocks, in[0]);
    grid::with_acc_type(in[0], [&](auto zero) {
      using Acc = decltype(zero);
      mk::BackwardArgs<Acc> a{};
      a.x = scan_args<Acc>(z, in, cu_seqlens);
      a.x.ckpt = data_of<Acc>(ckpt);
      a.dy = data_of<Acc>(dy), a.dhT = data_of<Acc>(dhT);
      a.dx = data_of<Acc>(dx), a.ddt = data_of<Acc>(ddt), a.dh0 = data_of<Acc>(dh0);
      a.dA_seqs = data_of<Acc>(dA_seqs), a.dB_tiles = data_of<Acc>(dB_tiles), a.dC_tiles = data_of<Acc>(dC_tiles);
      a.work = work.data_ptr<Acc>();
      mamba_kernel_form().run(in[0], a, z.blocks, mk::backward_block<Acc>,
                              MNEMO_DEVICE_LAUNCHER(mk::launch), "backward");
    });
    return {dx, ddt, dA_seqs.sum(0), dB_tiles.sum(0), dC_tiles.sum(0), dh0, Tensor(), Tensor()};
  }
};

Tensor no_sequences() { return torch::empty({0}, torch::kInt32); }

// x, Δ, A, B, C in the recurrence's dtype (docs/models.md#numerical-stability rule 1: fp32 under bf16), contiguous,
// then the initial state h0 (empty when packed).
variable_list compute_inputs(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& B, const Tensor& C,
                             const Tensor& h0) {
  const auto ct = recurrence_dtype(x);
  auto in = [&](const Tensor& t) { return t.to(ct).contiguous(); };
  return {in(x), in(dt), in(A), in(B), in(C), h0.defined() ? in(h0) : torch::empty({0}, x.options().dtype(ct))};
}

// The kernel on compute_inputs: the autograd node under grad mode, else the forward pass alone (no checkpoints).
// Returns y and, for rows, the final state.
variable_list run_scan(const variable_list& in, int64_t chunk, const Tensor& cu_seqlens) {
  if (torch::GradMode::is_enabled())
    return SelectiveScanKernelFn::apply(in[0], in[1], in[2], in[3], in[4], in[5], chunk, cu_seqlens);
  auto f = scan_forward(in, scan_dims(in[0], in[2], chunk, cu_seqlens), cu_seqlens, /*keep_checkpoints=*/false);
  return f.hT.defined() ? variable_list{f.y, f.hT} : variable_list{f.y};
}

}  // namespace selective_scan_kernel_node

using namespace selective_scan_kernel_node;

bool mamba_kernel_on_host() { return mamba_kernel_form().on_host(); }
void set_mamba_kernel_on_host(bool on) { mamba_kernel_form().set_on_host(on); }
int64_t mamba_kernel_passes() { return mamba_kernel_form().passes(); }

bool selective_scan_kernel_on_device(const torch::Tensor& x) {
  return x.defined() && x.is_cuda() && grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the doubling scan
}

bool selective_scan_kernel_eligible(const torch::Tensor& x) {
  if (!x.defined() || x.dim() != 3 || x.size(1) == 0) return false;
  if (x.is_cuda()) return selective_scan_kernel_on_device(x);
  return x.device().is_cpu() && mamba_kernel_on_host();
}

RecurrentResult selective_scan_kernel(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                      const torch::Tensor& B, const torch::Tensor& C,
                                      const torch::Tensor& initial_state, int64_t chunk_size) {
  check_selective_scan_inputs("selective_scan_kernel", x, dt, A, B, C, initial_state);
  check_chunking("selective_scan_kernel", x.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  auto h0 = initial_state.defined()
                ? initial_state
                : torch::zeros({x.size(0), x.size(2), A.size(1)}, x.options().dtype(recurrence_dtype(x)));
  const auto out = run_scan(compute_inputs(x, dt, A, B, C, h0), std::min(chunk_size, x.size(1)), no_sequences());
  return {out[0].to(x.scalar_type()), out[1]};
}

torch::Tensor selective_scan_kernel_packed(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                           const torch::Tensor& B, const torch::Tensor& C,
                                           const torch::Tensor& cu_seqlens, int64_t chunk_size) {
  const std::string op = "selective_scan_kernel_packed";
  check_selective_scan_inputs(op.c_str(), x, dt, A, B, C, {});
  check_chunking(op, x.size(1), chunk_size);
  if (x.size(0) != 1) throw Error(op + ": cu_seqlens needs a packed batch (B = 1), got B = " + std::to_string(x.size(0)));
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2 ||
      cu_seqlens.scalar_type() != torch::kInt32)
    throw Error(op + ": cu_seqlens must be int32 [sequences + 1]");
  const auto host = cu_seqlens.to(torch::kCPU).contiguous();
  const int32_t* bounds = host.data_ptr<int32_t>();
  const int64_t S = host.size(0) - 1;
  if (bounds[0] != 0 || bounds[S] != x.size(1))
    throw Error(op + ": cu_seqlens must start at 0 and end at T = " + std::to_string(x.size(1)));
  for (int64_t n = 0; n < S; ++n)
    if (bounds[n + 1] < bounds[n]) throw Error(op + ": cu_seqlens must be non-decreasing");
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto y = run_scan(compute_inputs(x, dt, A, B, C, {}), chunk_size, cu_seqlens.to(x.device()).contiguous())[0];
  return y.to(x.scalar_type());
}

}  // namespace mnemo
