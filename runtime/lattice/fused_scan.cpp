// The Lattice recurrence as one kernel a pass (lattice.h lattice_scan): the block code of scan_kernel.cuh on CUDA
// tensors through the launchers of scan_kernel.cu (builds with MNEMO_CUDA_KERNELS), and on CPU tensors over a
// sequential host grid (grid::run_on_host) inside a LatticeKernelHostScope, as one autograd node whose backward is the
// kernel's backward pass (tests/test_cuda_kernels_lattice.cpp checks it against the chunk form).
#include <string>

#include "core/common.h"
#include "runtime/kernels/block_pass.h"
#include "runtime/kernels/precision.h"
#include "runtime/lattice/gates.h"
#include "runtime/lattice/lattice.h"
#include "runtime/lattice/scan_kernel.h"

namespace mnemo {

namespace {

namespace lk = lattice_kernel;
using grid::data_of;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

grid::KernelForm& lattice_kernel_form() {
  static grid::KernelForm form("lattice_scan", "lattice scan kernel");
  return form;
}

lk::Dims scan_dims(const Tensor& q, const Tensor& v, int64_t chunk, int64_t p0, bool dec) {
  lk::Dims z{};
  z.blocks = q.size(0) * q.size(1);
  z.T = static_cast<int>(q.size(2)), z.m = static_cast<int>(q.size(3)), z.d = static_cast<int>(v.size(3));
  z.C = static_cast<int>(chunk), z.p0 = static_cast<int>(p0), z.dec = dec;
  return z;
}

template <class Acc>
lk::ForwardArgs<Acc> scan_args(const lk::Dims& z, const variable_list& x) {
  lk::ForwardArgs<Acc> a{};
  a.z = z;
  a.q = data_of<Acc>(x[0]), a.k = data_of<Acc>(x[1]), a.v = data_of<Acc>(x[2]), a.ga = data_of<Acc>(x[3]);
  a.mu = data_of<Acc>(x[4]), a.S_init = data_of<Acc>(x[5]), a.A_init = data_of<Acc>(x[6]);
  return a;
}

// Inputs q, k [B, H, T, m], v [B, H, T, d], γ, μ [B, H, T], S, A [B, H, m, d] (contiguous, one dtype); outputs y
// [B, H, T, d], the final state and anchor; the checkpoints kept for the backward.
struct ScanForward {
  Tensor y, S_fin, A_fin, ckpt;
};

ScanForward scan_forward(const variable_list& x, const lk::Dims& z) {
  const int64_t B = x[0].size(0), H = x[0].size(1);
  ScanForward f;
  f.y = torch::empty({B, H, z.T, z.d}, x[0].options());
  f.S_fin = torch::empty_like(x[5]), f.A_fin = torch::empty_like(x[5]);
  f.ckpt = torch::empty({B, H, lk::segment_count(z), 2, z.m, z.d}, x[0].options());
  const Tensor work = grid::workspace(lk::forward_work(z), z.blocks, x[0]);
  grid::with_acc_type(x[0], [&](auto zero) {
    using Acc = decltype(zero);
    auto a = scan_args<Acc>(z, x);
    a.y = data_of<Acc>(f.y), a.S_fin = data_of<Acc>(f.S_fin), a.A_fin = data_of<Acc>(f.A_fin);
    a.ckpt = data_of<Acc>(f.ckpt), a.work = work.data_ptr<Acc>();
    lattice_kernel_form().run(x[0], a, z.blocks, lk::forward_block<Acc>, MNEMO_DEVICE_LAUNCHER(lk::launch), "forward");
  });
  return f;
}

struct LatticeScanFn : torch::autograd::Function<LatticeScanFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& ga, const Tensor& mu, const Tensor& S, const Tensor& A, int64_t chunk,
                               int64_t p0, bool dec) {
    const variable_list x = {q, k, v, ga, mu, S, A};
    const auto z = scan_dims(q, v, chunk, p0, dec);
    auto f = scan_forward(x, z);
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["p0"] = p0;
    ctx->saved_data["dec"] = dec;
    ctx->save_for_backward({q, k, v, ga, mu, S, A, f.ckpt});
    return {f.y, f.S_fin, f.A_fin};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const auto sv = ctx->get_saved_variables();
    const variable_list x(sv.begin(), sv.begin() + 7);
    const Tensor& ckpt = sv[7];
    const auto z = scan_dims(x[0], x[2], ctx->saved_data["chunk"].toInt(), ctx->saved_data["p0"].toInt(),
                             ctx->saved_data["dec"].toBool());
    auto grad = [&](size_t i, const Tensor& like) {
      return (go[i].defined() ? go[i].to(like.scalar_type()) : torch::zeros_like(like)).contiguous();
    };
    const Tensor dy = grad(0, x[2]),  // y is shaped as v
                 dS = grad(1, x[5]), dA = grad(2, x[5]);
    variable_list g = {torch::empty_like(x[0]), torch::empty_like(x[1]), torch::empty_like(x[2]),
                       torch::empty_like(x[3]), torch::empty_like(x[4]), torch::empty_like(x[5]),
                       torch::empty_like(x[5])};
    const Tensor work = grid::workspace(lk::backward_work(z), z.blocks, x[0]);
    grid::with_acc_type(x[0], [&](auto zero) {
      using Acc = decltype(zero);
      lk::BackwardArgs<Acc> a{};
      a.x = scan_args<Acc>(z, x);
      a.x.ckpt = data_of<Acc>(ckpt);
      a.dy = data_of<Acc>(dy), a.dS_fin = data_of<Acc>(dS), a.dA_fin = data_of<Acc>(dA);
      a.dq = data_of<Acc>(g[0]), a.dk = data_of<Acc>(g[1]), a.dv = data_of<Acc>(g[2]), a.dga = data_of<Acc>(g[3]);
      a.dmu = data_of<Acc>(g[4]), a.dS_init = data_of<Acc>(g[5]), a.dA_init = data_of<Acc>(g[6]);
      a.work = work.data_ptr<Acc>();
      lattice_kernel_form().run(x[0], a, z.blocks, lk::backward_block<Acc>,
                                MNEMO_DEVICE_LAUNCHER(lk::launch), "backward");
    });
    g.resize(10);  // + chunk, p0, dec
    return g;
  }
};

}  // namespace

bool lattice_kernel_on_host() { return lattice_kernel_form().on_host(); }
void set_lattice_kernel_on_host(bool on) { lattice_kernel_form().set_on_host(on); }
int64_t lattice_kernel_passes() { return lattice_kernel_form().passes(); }

bool lattice_scan_eligible(const torch::Tensor& q) {
  if (!q.defined() || q.dim() != 4 || q.size(1) == 0) return false;
  if (q.is_cuda()) return grid::device_kernels_enabled();  // MNEMO_FUSED_CUDA=0: the chunk form
  return q.device().is_cpu() && lattice_kernel_on_host();
}

LatticeResult lattice_scan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st, int64_t chunk,
                           bool dec) {
  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast.
  const AutocastOff autocast_off;
  lattice_detail::check_inputs(q, k, v, gamma, mu, st.S);
  if (chunk < 1 || st.pos < 0 || st.pos >= chunk)
    throw Error("lattice: need chunk >= 1 and 0 <= pos < chunk, got chunk " + std::to_string(chunk) + ", pos " +
                std::to_string(st.pos));
  auto p = lattice_detail::prepare(q, k, v, gamma, mu);
  auto S = st.S.to(p.dt).contiguous();
  auto A = (st.pos == 0 ? st.S : st.S0).to(p.dt).contiguous();  // the anchor (unused by the kernel when pos == 0)
  const variable_list x = {p.q.contiguous(), p.k.contiguous(), p.v.contiguous(), p.ga.contiguous(),
                           p.mu.contiguous(), S, A};
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = LatticeScanFn::apply(x[0], x[1], x[2], x[3], x[4], x[5], x[6], chunk, st.pos, dec);
  } else {
    auto f = scan_forward(x, scan_dims(x[0], x[2], chunk, st.pos, dec));
    out = {f.y, f.S_fin, f.A_fin};
  }
  const int64_t T = q.size(1);
  return {out[0].transpose(1, 2).to(v.scalar_type()), {out[1], out[2], (st.pos + T) % chunk}};
}

}  // namespace mnemo
