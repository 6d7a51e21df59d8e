// The kernel form of the fused deep-memory chunk node (fused_chunk_forms.h): the block code of chunk_kernel.cuh on
// CUDA tensors through the launchers of chunk_kernel.cu (builds with MNEMO_CUDA_KERNELS), and on CPU tensors over a
// sequential host grid (grid::run_on_host) inside a DeepMemoryKernelHostScope: the CPU tests run the kernel's own
// decomposition that way against the tensor form (tests/test_fused_chunk.cpp).
#include "core/common.h"
#include "runtime/deep_memory/chunk_kernel.h"
#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/deep_memory/fused_chunk_forms.h"
#include "runtime/kernels/block_pass.h"

namespace mnemo {

namespace {

grid::KernelForm& deep_memory_kernel_form() {
  static grid::KernelForm form("deep_memory", "deep-memory chunk kernel");
  return form;
}

}  // namespace

int64_t deep_memory_kernel_passes() { return deep_memory_kernel_form().passes(); }

bool deep_memory_kernel_on_host() { return deep_memory_kernel_form().on_host(); }
void set_deep_memory_kernel_on_host(bool on) { deep_memory_kernel_form().set_on_host(on); }

namespace fused_chunk_forms {

namespace {

namespace dmk = deep_memory_kernel;
using grid::data_of;

bool momentum_only(size_t i) { return i == S0 || i == S1 || i == CD || i == DE || i == PE || i == EE; }

// Every input in the kernel's Acc, contiguous ([B, H, rows, cols] is then [blocks, rows, cols]); absent ones
// (momentum inputs without momentum) undefined.
variable_list contiguous_inputs(const variable_list& in, bool mom) {
  variable_list x(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && (!momentum_only(i) || mom)) x[i] = in[i].contiguous();
  return x;
}

dmk::Dims dims_of(const variable_list& x, bool mom, bool l2, double tau, bool bf16_products) {
  const Sizes s = sizes_of(x);
  dmk::Dims z{};
  z.blocks = s.B * s.H;
  z.n = static_cast<int>(s.n), z.N = static_cast<int>(s.N), z.d = static_cast<int>(s.d);
  z.f = static_cast<int>(s.f), z.hid = static_cast<int>(s.hid);
  z.mom = mom;
  z.l2 = l2;
  z.tau = tau;
  z.bf16_products = bf16_products && x[Q].scalar_type() == torch::kFloat32;
  return z;
}

template <class Acc>
dmk::ForwardArgs<Acc> forward_args(const dmk::Dims& z, const variable_list& x, const Forward& o) {
  dmk::ForwardArgs<Acc> a{};
  a.z = z;
  a.q = data_of<Acc>(x[Q]), a.qf = data_of<Acc>(x[QF]), a.k = data_of<Acc>(x[K]), a.kf = data_of<Acc>(x[KF]);
  a.v = data_of<Acc>(x[V]);
  a.W0 = data_of<Acc>(x[W0]), a.W1 = data_of<Acc>(x[W1]), a.S0 = data_of<Acc>(x[S0]), a.S1 = data_of<Acc>(x[S1]);
  a.A0 = data_of<Acc>(x[A0]), a.A1 = data_of<Acc>(x[A1]), a.A = data_of<Acc>(x[CA]), a.D = data_of<Acc>(x[CD]);
  a.C = data_of<Acc>(x[CC]);
  a.ae = data_of<Acc>(x[AE]), a.de = data_of<Acc>(x[DE]), a.ce = data_of<Acc>(x[CE]), a.pe = data_of<Acc>(x[PE]);
  a.ee = data_of<Acc>(x[EE]);
  a.y = data_of<Acc>(o.y), a.w0 = data_of<Acc>(o.w0), a.w1 = data_of<Acc>(o.w1), a.s0 = data_of<Acc>(o.s0);
  a.s1 = data_of<Acc>(o.s1);
  a.P0 = data_of<Acc>(o.P0), a.G0 = data_of<Acc>(o.G0), a.E = data_of<Acc>(o.E), a.RP0d = data_of<Acc>(o.RP0d);
  a.Dl = data_of<Acc>(o.Dl);
  a.c0 = data_of<Acc>(o.c0), a.c1 = data_of<Acc>(o.c1), a.QK = data_of<Acc>(o.QK), a.X1 = data_of<Acc>(o.X1);
  a.M1 = data_of<Acc>(o.M1);
  a.GG = data_of<Acc>(o.GG), a.Ga = data_of<Acc>(o.Ga), a.Pa = data_of<Acc>(o.Pa);
  a.kk = data_of<Acc>(o.clip.kk), a.dd = data_of<Acc>(o.clip.dd), a.eev = data_of<Acc>(o.clip.ee);
  a.gg = data_of<Acc>(o.clip.gg);
  a.sv = data_of<Acc>(o.clip.s), a.fv = data_of<Acc>(o.clip.f);
  return a;
}

}  // namespace

bool kernel_form_eligible(const variable_list& in, bool mom) {
  if (!in[Q].defined() || in[Q].dim() != 4 || in[Q].numel() == 0) return false;
  const auto dtype = in[Q].scalar_type();
  if (dtype != torch::kFloat32 && dtype != torch::kFloat64) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (momentum_only(i) && !mom) continue;
    const auto& t = in[i];
    if (!t.defined() || t.scalar_type() != dtype || t.device() != in[Q].device()) return false;
  }
  if (in[Q].is_cuda()) return grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the tensor form
  return in[Q].device().is_cpu() && deep_memory_kernel_on_host();
}

Forward kernel_forward(const variable_list& in, bool mom, bool l2, double tau, bool bf16_products) {
  const auto x = contiguous_inputs(in, mom);
  const auto z = dims_of(x, mom, l2, tau, bf16_products);
  Forward o = empty_forward(sizes_of(x), x[Q].options(), mom, tau);
  const Tensor work = grid::workspace(dmk::forward_work(z), z.blocks, x[Q]);
  auto run = [&](auto zero) {
    using Acc = decltype(zero);
    auto a = forward_args<Acc>(z, x, o);
    a.work = work.data_ptr<Acc>();
    deep_memory_kernel_form().run(x[Q], a, z.blocks, dmk::forward_block<Acc>,
                                  MNEMO_DEVICE_LAUNCHER(dmk::launch), "forward", z.bf16_products);
  };
  grid::with_acc_type(x[Q], run);
  return o;
}

variable_list kernel_backward(const variable_list& in, const Forward& f, const variable_list& go, bool mom, bool l2,
                              double tau, bool bf16_products) {
  const auto x = contiguous_inputs(in, mom);  // v is not kept (v̄ = -ḡ_y)
  const auto z = dims_of(x, mom, l2, tau, bf16_products);
  auto grad_out = [&](size_t i, const Tensor& like) {
    return (i < go.size() && go[i].defined() ? go[i].to(like.scalar_type()) : torch::zeros_like(like)).contiguous();
  };
  const Tensor gy = grad_out(0, x[Q]), gw0 = grad_out(1, x[W0]), gw1 = grad_out(2, x[W1]);
  const Tensor gs0 = mom ? grad_out(3, x[S0]) : Tensor(), gs1 = mom ? grad_out(4, x[S1]) : Tensor();
  variable_list g = empty_input_grads(sizes_of(x), x[Q].options(), mom, l2);
  const Tensor work = grid::workspace(dmk::backward_work(z), z.blocks, x[Q]);
  auto run = [&](auto zero) {
    using Acc = decltype(zero);
    dmk::BackwardArgs<Acc> a{};
    a.x = forward_args<Acc>(z, x, f);
    a.gy = data_of<Acc>(gy), a.gw0 = data_of<Acc>(gw0), a.gw1 = data_of<Acc>(gw1), a.gs0 = data_of<Acc>(gs0);
    a.gs1 = data_of<Acc>(gs1);
    a.gqf = data_of<Acc>(g[QF]), a.gk = data_of<Acc>(g[K]), a.gkf = data_of<Acc>(g[KF]), a.gv = data_of<Acc>(g[V]);
    a.gW0 = data_of<Acc>(g[W0]), a.gW1 = data_of<Acc>(g[W1]), a.gS0 = data_of<Acc>(g[S0]), a.gS1 = data_of<Acc>(g[S1]);
    a.gA0 = data_of<Acc>(g[A0]), a.gA1 = data_of<Acc>(g[A1]), a.gA = data_of<Acc>(g[CA]), a.gD = data_of<Acc>(g[CD]);
    a.gC = data_of<Acc>(g[CC]), a.gae = data_of<Acc>(g[AE]), a.gde = data_of<Acc>(g[DE]), a.gce = data_of<Acc>(g[CE]);
    a.gpe = data_of<Acc>(g[PE]), a.gee = data_of<Acc>(g[EE]);
    a.work = work.data_ptr<Acc>();
    deep_memory_kernel_form().run(x[Q], a, z.blocks, dmk::backward_block<Acc>,
                                  MNEMO_DEVICE_LAUNCHER(dmk::launch), "backward", z.bf16_products);
  };
  grid::with_acc_type(x[Q], run);
  g[Q] = go[0].defined() ? go[0] : torch::zeros_like(in[Q]);
  return g;
}

}  // namespace fused_chunk_forms

}  // namespace mnemo
