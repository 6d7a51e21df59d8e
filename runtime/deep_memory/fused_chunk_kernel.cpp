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
  static grid::KernelForm form;
  return form;
}

}  // namespace

int64_t deep_memory_kernel_passes() { return deep_memory_kernel_form().passes(); }

bool deep_memory_kernel_on_host() { return deep_memory_kernel_form().on_host(); }
void set_deep_memory_kernel_on_host(bool on) { deep_memory_kernel_form().set_on_host(on); }

namespace fused_chunk_forms {

namespace {

namespace dmk = deep_memory_kernel;

bool momentum_only(size_t i) { return i == S0 || i == S1 || i == CD || i == DE || i == PE || i == EE; }

// Every input in the kernel's Acc, contiguous ([B, H, rows, cols] is then [blocks, rows, cols]); absent ones
// (momentum inputs without momentum) undefined.
variable_list contiguous_inputs(const variable_list& in, bool mom) {
  variable_list x(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && (!momentum_only(i) || mom)) x[i] = in[i].contiguous();
  return x;
}

template <class Acc>
Acc* ptr(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_ptr<Acc>() : nullptr;
}

dmk::Dims dims_of(const variable_list& x, bool mom, bool l2, double tau) {
  const Sizes s = sizes_of(x);
  dmk::Dims z{};
  z.blocks = s.B * s.H;
  z.n = static_cast<int>(s.n), z.N = static_cast<int>(s.N), z.d = static_cast<int>(s.d);
  z.f = static_cast<int>(s.f), z.hid = static_cast<int>(s.hid);
  z.mom = mom;
  z.l2 = l2;
  z.tau = tau;
  return z;
}

template <class Acc>
dmk::ForwardArgs<Acc> forward_args(const dmk::Dims& z, const variable_list& x, const Forward& o) {
  dmk::ForwardArgs<Acc> a{};
  a.z = z;
  a.q = ptr<Acc>(x[Q]), a.qf = ptr<Acc>(x[QF]), a.k = ptr<Acc>(x[K]), a.kf = ptr<Acc>(x[KF]), a.v = ptr<Acc>(x[V]);
  a.W0 = ptr<Acc>(x[W0]), a.W1 = ptr<Acc>(x[W1]), a.S0 = ptr<Acc>(x[S0]), a.S1 = ptr<Acc>(x[S1]);
  a.A0 = ptr<Acc>(x[A0]), a.A1 = ptr<Acc>(x[A1]), a.A = ptr<Acc>(x[CA]), a.D = ptr<Acc>(x[CD]), a.C = ptr<Acc>(x[CC]);
  a.ae = ptr<Acc>(x[AE]), a.de = ptr<Acc>(x[DE]), a.ce = ptr<Acc>(x[CE]), a.pe = ptr<Acc>(x[PE]), a.ee = ptr<Acc>(x[EE]);
  a.y = ptr<Acc>(o.y), a.w0 = ptr<Acc>(o.w0), a.w1 = ptr<Acc>(o.w1), a.s0 = ptr<Acc>(o.s0), a.s1 = ptr<Acc>(o.s1);
  a.P0 = ptr<Acc>(o.P0), a.G0 = ptr<Acc>(o.G0), a.E = ptr<Acc>(o.E), a.RP0d = ptr<Acc>(o.RP0d), a.Dl = ptr<Acc>(o.Dl);
  a.c0 = ptr<Acc>(o.c0), a.c1 = ptr<Acc>(o.c1), a.QK = ptr<Acc>(o.QK), a.X1 = ptr<Acc>(o.X1), a.M1 = ptr<Acc>(o.M1);
  a.GG = ptr<Acc>(o.GG), a.Ga = ptr<Acc>(o.Ga), a.Pa = ptr<Acc>(o.Pa);
  a.kk = ptr<Acc>(o.clip.kk), a.dd = ptr<Acc>(o.clip.dd), a.eev = ptr<Acc>(o.clip.ee), a.gg = ptr<Acc>(o.clip.gg);
  a.sv = ptr<Acc>(o.clip.s), a.fv = ptr<Acc>(o.clip.f);
  return a;
}

Tensor workspace(int64_t per_block, const dmk::Dims& z, const Tensor& like) {
  return torch::empty({std::max<int64_t>(1, z.blocks * per_block)}, like.options());
}

// One pass: the launcher on a CUDA tensor, else the block function over the host grid.
template <class Args, class BlockFn>
void run_pass(const Tensor& like, const Args& args, int64_t blocks, BlockFn block_fn, const char* what) {
  deep_memory_kernel_form().run(like, args, blocks, block_fn, MNEMO_DEVICE_LAUNCHER(dmk::launch),
                                std::string("deep-memory chunk kernel, ") + what);
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

Forward kernel_forward(const variable_list& in, bool mom, bool l2, double tau) {
  const auto x = contiguous_inputs(in, mom);
  const auto z = dims_of(x, mom, l2, tau);
  Forward o = empty_forward(sizes_of(x), x[Q].options(), mom, tau);
  const Tensor work = workspace(dmk::forward_work(z), z, x[Q]);
  auto run = [&](auto zero) {
    using Acc = decltype(zero);
    auto a = forward_args<Acc>(z, x, o);
    a.work = work.data_ptr<Acc>();
    run_pass(x[Q], a, z.blocks, dmk::forward_block<Acc>, "forward");
  };
  if (x[Q].scalar_type() == torch::kFloat64) run(0.0);
  else run(0.f);
  return o;
}

variable_list kernel_backward(const variable_list& in, const Forward& f, const variable_list& go, bool mom, bool l2,
                              double tau) {
  const auto x = contiguous_inputs(in, mom);  // v is not kept (v̄ = -ḡ_y)
  const auto z = dims_of(x, mom, l2, tau);
  auto grad_out = [&](size_t i, const Tensor& like) {
    return (i < go.size() && go[i].defined() ? go[i].to(like.scalar_type()) : torch::zeros_like(like)).contiguous();
  };
  const Tensor gy = grad_out(0, x[Q]), gw0 = grad_out(1, x[W0]), gw1 = grad_out(2, x[W1]);
  const Tensor gs0 = mom ? grad_out(3, x[S0]) : Tensor(), gs1 = mom ? grad_out(4, x[S1]) : Tensor();
  variable_list g = empty_input_grads(sizes_of(x), x[Q].options(), mom, l2);
  const Tensor work = workspace(dmk::backward_work(z), z, x[Q]);
  auto run = [&](auto zero) {
    using Acc = decltype(zero);
    dmk::BackwardArgs<Acc> a{};
    a.x = forward_args<Acc>(z, x, f);
    a.gy = ptr<Acc>(gy), a.gw0 = ptr<Acc>(gw0), a.gw1 = ptr<Acc>(gw1), a.gs0 = ptr<Acc>(gs0), a.gs1 = ptr<Acc>(gs1);
    a.gqf = ptr<Acc>(g[QF]), a.gk = ptr<Acc>(g[K]), a.gkf = ptr<Acc>(g[KF]), a.gv = ptr<Acc>(g[V]);
    a.gW0 = ptr<Acc>(g[W0]), a.gW1 = ptr<Acc>(g[W1]), a.gS0 = ptr<Acc>(g[S0]), a.gS1 = ptr<Acc>(g[S1]);
    a.gA0 = ptr<Acc>(g[A0]), a.gA1 = ptr<Acc>(g[A1]), a.gA = ptr<Acc>(g[CA]), a.gD = ptr<Acc>(g[CD]);
    a.gC = ptr<Acc>(g[CC]), a.gae = ptr<Acc>(g[AE]), a.gde = ptr<Acc>(g[DE]), a.gce = ptr<Acc>(g[CE]);
    a.gpe = ptr<Acc>(g[PE]), a.gee = ptr<Acc>(g[EE]);
    a.work = work.data_ptr<Acc>();
    run_pass(x[Q], a, z.blocks, dmk::backward_block<Acc>, "backward");
  };
  if (x[Q].scalar_type() == torch::kFloat64) run(0.0);
  else run(0.f);
  g[Q] = go[0].defined() ? go[0] : torch::zeros_like(in[Q]);
  return g;
}

}  // namespace fused_chunk_forms

}  // namespace mnemo
