// The kernel form of the fused Miras segment node (fused_segment.h): the block code of segment_kernel.cuh on CUDA
// tensors through the launchers of segment_kernel.cu (builds with MNEMO_CUDA_KERNELS), and on CPU tensors over a
// sequential host grid (grid::run_on_host) inside a MirasKernelHostScope: the CPU tests run the kernel's own
// decomposition that way against the node's tensor form (tests/test_cuda_kernels_miras.cpp).
#include <string>

#include "core/common.h"
#include "runtime/kernels/block_pass.h"
#include "runtime/miras/fused_segment.h"
#include "runtime/miras/segment_kernel.h"

namespace mnemo {

namespace {

grid::KernelForm& miras_kernel_form() {
  static grid::KernelForm form("miras_segment", "miras segment kernel");
  return form;
}

}  // namespace

bool miras_kernel_on_host() { return miras_kernel_form().on_host(); }
void set_miras_kernel_on_host(bool on) { miras_kernel_form().set_on_host(on); }
int64_t miras_kernel_passes() { return miras_kernel_form().passes(); }

namespace miras_segment_kernel {

namespace {

namespace mk = miras_kernel;
using grid::data_of;
using torch::Tensor;

bool huber(const MirasOptions& o) { return o.bias == "huber"; }

// The kernel's view of the inputs: every tensor contiguous in the one dtype, the weights expanded over the batch,
// γ and β as [H, d], σ0 and σ1 as [B·H].
struct KernelInputs {
  int64_t B, H, n, d, hid, G;
  Tensor q, k, v, la, eta, delta, gam, bet, an0, an1, w0, w1, sc0, sc1;
};

KernelInputs kernel_inputs(const MirasSegmentInputs& x, const MirasOptions& o) {
  KernelInputs c;
  c.B = x.q.size(0), c.H = x.q.size(1), c.n = x.q.size(2), c.d = x.q.size(3);
  c.hid = x.anchor[0].size(2), c.G = x.log_alpha.size(3);
  const int64_t B = c.B, H = c.H, n = c.n, d = c.d, hid = c.hid;
  c.q = x.q.contiguous(), c.k = x.k.contiguous(), c.v = x.v.contiguous();
  c.la = x.log_alpha.expand({B, H, n, c.G}).contiguous(), c.eta = x.eta.expand({B, H, n, c.G}).contiguous();
  if (huber(o)) c.delta = x.delta.expand({B, H, n}).contiguous();
  c.gam = x.gamma.expand({1, H, 1, d}).reshape({H, d}).contiguous();
  c.bet = x.beta.expand({1, H, 1, d}).reshape({H, d}).contiguous();
  c.an0 = x.anchor[0].expand({B, H, hid, d}).contiguous(), c.an1 = x.anchor[1].expand({B, H, d, hid}).contiguous();
  c.w0 = x.cur[0].expand({B, H, hid, d}).contiguous(), c.w1 = x.cur[1].expand({B, H, d, hid}).contiguous();
  if (x.scale0.defined()) {
    c.sc0 = x.scale0.expand({B, H, 1, 1}).reshape({B * H}).contiguous();
    c.sc1 = x.scale1.expand({B, H, 1, 1}).reshape({B * H}).contiguous();
  }
  return c;
}

mk::Dims dims_of(const KernelInputs& c, const MirasOptions& o, bool bf16_products) {
  mk::Dims z{};
  z.blocks = c.B * c.H;
  z.H = static_cast<int>(c.H), z.n = static_cast<int>(c.n), z.d = static_cast<int>(c.d);
  z.hid = static_cast<int>(c.hid), z.G = static_cast<int>(c.G);
  z.bias = o.bias == "l2" ? mk::kL2 : o.bias == "lp" ? mk::kLp : mk::kHuber;
  z.scaled = c.sc0.defined();
  z.p = o.p, z.lp_eps = o.lp_eps, z.huber_eps = o.huber_eps, z.ln_eps = o.ln_eps;
  z.bf16_products = bf16_products && c.q.scalar_type() == torch::kFloat32;
  return z;
}

// Saved intermediates, in this order (segment_kernel.cuh ForwardArgs).
enum Saved { kG0, kP0, kP0d, kR, kN0, kE, kGy, kGu, kS0, kHub, kB, kA0m, kS1, kH, kGa, kPa, kUu, kNrm, kS, kSaved };

std::vector<Tensor> empty_saved(const KernelInputs& c) {
  const auto opt = c.q.options();
  const int64_t B = c.B, H = c.H, n = c.n, d = c.d, hid = c.hid;
  std::vector<Tensor> s(kSaved);
  for (int i : {kG0, kP0, kP0d, kR, kH, kGa, kPa}) s[i] = torch::empty({B, H, n, hid}, opt);
  for (int i : {kN0, kE, kGy, kGu, kUu, kNrm}) s[i] = torch::empty({B, H, n, d}, opt);
  for (int i : {kS0, kHub, kS}) s[i] = torch::empty({B, H, n}, opt);
  s[kB] = torch::empty({B, H, n, c.G}, opt);
  s[kA0m] = torch::empty({B, H, n, n}, opt), s[kS1] = torch::empty({B, H, n, n}, opt);
  return s;
}

template <class Acc>
mk::ForwardArgs<Acc> forward_args(const mk::Dims& z, const KernelInputs& c, const std::vector<Tensor>& s) {
  mk::ForwardArgs<Acc> a{};
  a.z = z;
  a.q = data_of<Acc>(c.q), a.k = data_of<Acc>(c.k), a.v = data_of<Acc>(c.v), a.la = data_of<Acc>(c.la);
  a.eta = data_of<Acc>(c.eta);
  a.delta = data_of<Acc>(c.delta), a.gam = data_of<Acc>(c.gam), a.bet = data_of<Acc>(c.bet), a.A0 = data_of<Acc>(c.an0);
  a.A1 = data_of<Acc>(c.an1), a.W0 = data_of<Acc>(c.w0), a.W1 = data_of<Acc>(c.w1), a.sc0 = data_of<Acc>(c.sc0);
  a.sc1 = data_of<Acc>(c.sc1);
  a.G0 = data_of<Acc>(s[kG0]), a.P0 = data_of<Acc>(s[kP0]), a.P0d = data_of<Acc>(s[kP0d]), a.R = data_of<Acc>(s[kR]);
  a.N0 = data_of<Acc>(s[kN0]), a.E = data_of<Acc>(s[kE]), a.Gy = data_of<Acc>(s[kGy]), a.Gu = data_of<Acc>(s[kGu]);
  a.s0 = data_of<Acc>(s[kS0]), a.hub = data_of<Acc>(s[kHub]), a.b = data_of<Acc>(s[kB]), a.A0m = data_of<Acc>(s[kA0m]);
  a.S1 = data_of<Acc>(s[kS1]), a.h = data_of<Acc>(s[kH]), a.Ga = data_of<Acc>(s[kGa]), a.Pa = data_of<Acc>(s[kPa]);
  a.uu = data_of<Acc>(s[kUu]), a.nrm = data_of<Acc>(s[kNrm]), a.s = data_of<Acc>(s[kS]);
  return a;
}

}  // namespace

bool eligible(const MirasSegmentInputs& x, const MirasOptions& o) {
  if (!x.q.defined() || x.q.dim() != 4 || x.q.numel() == 0) return false;
  if (x.anchor.size() != 2 || x.cur.size() != 2) return false;
  const auto dtype = x.q.scalar_type();
  if (dtype != torch::kFloat32 && dtype != torch::kFloat64) return false;
  const int64_t G = x.log_alpha.size(-1);
  if (G != 1 && G != x.q.size(3)) return false;
  std::vector<Tensor> all = {x.k, x.v, x.log_alpha, x.eta, x.gamma, x.beta, x.anchor[0], x.anchor[1], x.cur[0],
                             x.cur[1]};
  if (huber(o)) all.push_back(x.delta);
  if (x.scale0.defined()) all.push_back(x.scale0), all.push_back(x.scale1);
  for (const auto& t : all)
    if (!t.defined() || t.scalar_type() != dtype || t.device() != x.q.device()) return false;
  if (x.q.is_cuda()) return grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the tensor form
  return x.q.device().is_cpu() && miras_kernel_on_host();
}

Forward forward(const MirasSegmentInputs& x, const MirasOptions& o, bool bf16_products) {
  const KernelInputs c = kernel_inputs(x, o);
  const mk::Dims z = dims_of(c, o, bf16_products);
  Forward f;
  f.saved = empty_saved(c);
  f.out.out = torch::empty_like(c.q);
  f.out.end = {torch::empty_like(c.w0), torch::empty_like(c.w1)};
  const Tensor work = grid::workspace(mk::forward_work(z), z.blocks, c.q);
  grid::with_acc_type(c.q, [&](auto zero) {
    using Acc = decltype(zero);
    auto a = forward_args<Acc>(z, c, f.saved);
    a.out = data_of<Acc>(f.out.out), a.w0 = data_of<Acc>(f.out.end[0]), a.w1 = data_of<Acc>(f.out.end[1]);
    a.work = work.data_ptr<Acc>();
    miras_kernel_form().run(c.q, a, z.blocks, mk::forward_block<Acc>,
                            MNEMO_DEVICE_LAUNCHER(mk::launch), "forward", z.bf16_products);
  });
  return f;
}

MirasSegmentInputs backward(const MirasSegmentInputs& x, const std::vector<Tensor>& saved, const Tensor& grad_out,
                            const Tensor& grad_w0, const Tensor& grad_w1, const MirasOptions& o,
                            bool bf16_products) {
  const KernelInputs c = kernel_inputs(x, o);
  const mk::Dims z = dims_of(c, o, bf16_products);
  auto grad_or_zeros = [&](const Tensor& g, const Tensor& like) {
    return (g.defined() ? g.to(like.scalar_type()) : torch::zeros_like(like)).contiguous();
  };
  const Tensor gout = grad_or_zeros(grad_out, c.q), gw0 = grad_or_zeros(grad_w0, c.w0),
               gw1 = grad_or_zeros(grad_w1, c.w1);
  const auto opt = c.q.options();
  const int64_t B = c.B, H = c.H;
  MirasSegmentInputs g;
  g.q = torch::empty_like(c.q), g.k = torch::empty_like(c.q), g.v = torch::empty_like(c.q);
  g.log_alpha = torch::empty_like(c.la), g.eta = torch::empty_like(c.eta);
  if (huber(o)) g.delta = torch::empty_like(c.delta);
  Tensor ggam = torch::empty({B, H, c.d}, opt), gbet = torch::empty({B, H, c.d}, opt);
  g.anchor = {torch::empty_like(c.an0), torch::empty_like(c.an1)};
  g.cur = {torch::empty_like(c.w0), torch::empty_like(c.w1)};
  if (z.scaled) g.scale0 = torch::empty({B * H}, opt), g.scale1 = torch::empty({B * H}, opt);
  const Tensor work = grid::workspace(mk::backward_work(z), z.blocks, c.q);
  grid::with_acc_type(c.q, [&](auto zero) {
    using Acc = decltype(zero);
    mk::BackwardArgs<Acc> a{};
    a.x = forward_args<Acc>(z, c, saved);
    a.gout = data_of<Acc>(gout), a.gw0 = data_of<Acc>(gw0), a.gw1 = data_of<Acc>(gw1);
    a.gq = data_of<Acc>(g.q), a.gk = data_of<Acc>(g.k), a.gv = data_of<Acc>(g.v), a.gla = data_of<Acc>(g.log_alpha);
    a.geta = data_of<Acc>(g.eta), a.gdelta = data_of<Acc>(g.delta), a.ggam = data_of<Acc>(ggam);
    a.gbet = data_of<Acc>(gbet);
    a.gA0 = data_of<Acc>(g.anchor[0]), a.gA1 = data_of<Acc>(g.anchor[1]), a.gW0 = data_of<Acc>(g.cur[0]);
    a.gW1 = data_of<Acc>(g.cur[1]), a.gsc0 = data_of<Acc>(g.scale0), a.gsc1 = data_of<Acc>(g.scale1);
    a.work = work.data_ptr<Acc>();
    miras_kernel_form().run(c.q, a, z.blocks, mk::backward_block<Acc>,
                            MNEMO_DEVICE_LAUNCHER(mk::launch), "backward", z.bf16_products);
  });
  // Back to the inputs' shapes: what broadcast over the batch (or a head) takes the summed gradient.
  g.log_alpha = g.log_alpha.sum_to_size(x.log_alpha.sizes());
  g.eta = g.eta.sum_to_size(x.eta.sizes());
  if (huber(o)) g.delta = g.delta.sum_to_size(x.delta.sizes());
  g.gamma = ggam.sum(0).view({1, H, 1, c.d}).sum_to_size(x.gamma.sizes());
  g.beta = gbet.sum(0).view({1, H, 1, c.d}).sum_to_size(x.beta.sizes());
  for (size_t l = 0; l < 2; ++l) {
    g.anchor[l] = g.anchor[l].sum_to_size(x.anchor[l].sizes());
    g.cur[l] = g.cur[l].sum_to_size(x.cur[l].sizes());
  }
  if (z.scaled) {
    g.scale0 = g.scale0.view({B, H, 1, 1}).sum_to_size(x.scale0.sizes());
    g.scale1 = g.scale1.view({B, H, 1, 1}).sum_to_size(x.scale1.sizes());
  }
  return g;
}

}  // namespace miras_segment_kernel

}  // namespace mnemo
