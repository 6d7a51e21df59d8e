// Mamba's selective scan as one kernel a pass (selective_scan.h selective_scan_kernel): the block code of
// scan_kernel.cuh on CUDA tensors through the launchers of scan_kernel.cu (builds with MNEMO_CUDA_KERNELS), and on CPU
// tensors over a sequential host grid (grid::run_on_host) inside a MambaKernelHostScope, as one autograd node whose
// backward is the kernel's backward pass (tests/test_cuda_kernels_mamba.cpp checks it against the other forms).
#include <string>

#include "core/common.h"
#include "runtime/kernels/block_pass.h"
#include "runtime/kernels/kernel_counts.h"
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
  static grid::KernelForm form;
  return form;
}

// One pass: the launcher on a CUDA tensor, else the block function over the host grid.
template <class Args, class BlockFn>
void run_scan_pass(const Tensor& like, const Args& args, int64_t blocks, BlockFn block_fn, const char* what) {
  count_kernel_pass(std::string("selective_scan ") + what, like, products_label(like.scalar_type(), false));
  mamba_kernel_form().run(like, args, blocks, block_fn, MNEMO_DEVICE_LAUNCHER(mk::launch),
                          std::string("mamba selective-scan kernel, ") + what);
}

mk::Dims scan_dims(const Tensor& x, const Tensor& A, int64_t chunk) {
  return mk::make_dims(static_cast<int>(x.size(0)), static_cast<int>(x.size(1)), static_cast<int>(x.size(2)),
                       static_cast<int>(A.size(1)), static_cast<int>(chunk));
}

// Inputs x, dt [B, T, D], A [D, N], B, C [B, T, N], h0 [B, D, N] (contiguous, one dtype).
template <class Acc>
mk::ForwardArgs<Acc> scan_args(const mk::Dims& z, const variable_list& in) {
  mk::ForwardArgs<Acc> a{};
  a.z = z;
  a.x = data_of<Acc>(in[0]), a.dt = data_of<Acc>(in[1]), a.A = data_of<Acc>(in[2]);
  a.Bm = data_of<Acc>(in[3]), a.Cm = data_of<Acc>(in[4]), a.h0 = data_of<Acc>(in[5]);
  return a;
}

struct ScanForward {
  Tensor y, hT, ckpt;  // ckpt undefined when not kept
};

ScanForward scan_forward(const variable_list& in, const mk::Dims& z, bool keep_checkpoints) {
  ScanForward f;
  f.y = torch::empty_like(in[0]);
  f.hT = torch::empty_like(in[5]);
  if (keep_checkpoints) f.ckpt = torch::empty({z.B, z.chunks, z.D, z.N}, in[0].options());
  const Tensor work = grid::workspace(mk::forward_work(z), z.blocks, in[0]);
  grid::with_acc_type(in[0], [&](auto zero) {
    using Acc = decltype(zero);
    auto a = scan_args<Acc>(z, in);
    a.y = data_of<Acc>(f.y), a.hT = data_of<Acc>(f.hT), a.ckpt = data_of<Acc>(f.ckpt);
    a.work = work.data_ptr<Acc>();
    run_scan_pass(in[0], a, z.blocks, mk::forward_block<Acc>, "forward");
  });
  return f;
}

struct SelectiveScanKernelFn : torch::autograd::Function<SelectiveScanKernelFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& dt, const Tensor& A,
                               const Tensor& Bm, const Tensor& Cm, const Tensor& h0, int64_t chunk) {
    const variable_list in = {x, dt, A, Bm, Cm, h0};
    auto f = scan_forward(in, scan_dims(x, A, chunk), /*keep_checkpoints=*/true);
    ctx->saved_data["chunk"] = chunk;
    ctx->save_for_backward({x, dt, A, Bm, Cm, h0, f.ckpt});
    return {f.y, f.hT};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const auto sv = ctx->get_saved_variables();
    const variable_list in(sv.begin(), sv.begin() + 6);
    const Tensor& ckpt = sv[6];
    const auto z = scan_dims(in[0], in[2], ctx->saved_data["chunk"].toInt());
    auto grad = [&](size_t i, const Tensor& like) {
      return (go[i].defined() ? go[i].to(like.scalar_type()) : torch::zeros_like(like)).contiguous();
    };
    const Tensor dy = grad(0, in[0]), dhT = grad(1, in[5]);
    Tensor dx = torch::empty_like(in[0]), ddt = torch::empty_like(in[1]), dh0 = torch::empty_like(in[5]);
    Tensor dA_rows = torch::empty({z.B, z.D, z.N}, in[0].options());
    Tensor dB_tiles = torch::empty({z.tiles, z.B, z.T, z.N}, in[0].options()), dC_tiles = torch::empty_like(dB_tiles);
    const Tensor work = grid::workspace(mk::backward_work(z), z.blocks, in[0]);
    grid::with_acc_type(in[0], [&](auto zero) {
      using Acc = decltype(zero);
      mk::BackwardArgs<Acc> a{};
      a.x = scan_args<Acc>(z, in);
      a.x.ckpt = data_of<Acc>(ckpt);
      a.dy = data_of<Acc>(dy), a.dhT = data_of<Acc>(dhT);
      a.dx = data_of<Acc>(dx), a.ddt = data_of<Acc>(ddt), a.dh0 = data_of<Acc>(dh0);
      a.dA_rows = data_of<Acc>(dA_rows), a.dB_tiles = data_of<Acc>(dB_tiles), a.dC_tiles = data_of<Acc>(dC_tiles);
      a.work = work.data_ptr<Acc>();
      run_scan_pass(in[0], a, z.blocks, mk::backward_block<Acc>, "backward");
    });
    return {dx, ddt, dA_rows.sum(0), dB_tiles.sum(0), dC_tiles.sum(0), dh0, Tensor()};
  }
};

}  // namespace selective_scan_kernel_node

using namespace selective_scan_kernel_node;

bool mamba_kernel_on_host() { return mamba_kernel_form().on_host(); }
void set_mamba_kernel_on_host(bool on) { mamba_kernel_form().set_on_host(on); }
int64_t mamba_kernel_passes() { return mamba_kernel_form().passes(); }

bool selective_scan_kernel_eligible(const torch::Tensor& x) {
  if (!x.defined() || x.dim() != 3 || x.size(1) == 0) return false;
  if (x.is_cuda()) return grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the doubling scan
  return x.device().is_cpu() && mamba_kernel_on_host();
}

RecurrentResult selective_scan_kernel(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                      const torch::Tensor& B, const torch::Tensor& C,
                                      const torch::Tensor& initial_state, int64_t chunk_size) {
  check_selective_scan_inputs("selective_scan_kernel", x, dt, A, B, C, initial_state);
  check_chunking("selective_scan_kernel", x.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  auto in = [&](const torch::Tensor& t) { return t.to(ct).contiguous(); };
  auto h0 = initial_state.defined() ? in(initial_state)
                                    : torch::zeros({x.size(0), x.size(2), A.size(1)}, x.options().dtype(ct));
  const int64_t chunk = std::min(chunk_size, x.size(1));
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = SelectiveScanKernelFn::apply(in(x), in(dt), in(A), in(B), in(C), h0, chunk);
  } else {
    const variable_list inputs = {in(x), in(dt), in(A), in(B), in(C), h0};
    auto f = scan_forward(inputs, scan_dims(inputs[0], inputs[2], chunk), /*keep_checkpoints=*/false);
    out = {f.y, f.hT};
  }
  return {out[0].to(x.scalar_type()), out[1]};
}

}  // namespace mnemo
