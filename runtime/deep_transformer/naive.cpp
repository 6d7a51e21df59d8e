// DOT kernel (see kernel_memory.h; docs/models.md#deeptransformers-swdt-and-dot, docs/models.md#dla-swla-and-omeganet):
// the kernel-form Omega rule token by token, the reference of the chunk form (chunk.cpp) and the decode step.
#include <vector>

#include "core/common.h"
#include "runtime/deep_transformer/kernel_memory.h"
#include "runtime/deep_transformer/prepare.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace deep_transformer_detail {
namespace {

// Append T new tokens (zero coefficients) to the state.
DotState dot_append(const DotState& st, const DotPrep& p, int64_t from, int64_t len) {
  DotState o = st;
  auto zeros = torch::zeros({p.V.size(0), p.V.size(1), len, p.V.size(3)}, p.V.options());
  o.k = cat_or(st.k.defined() ? st.k.to(p.dt) : torch::Tensor(), p.K.narrow(2, from, len));
  o.v = cat_or(st.v.defined() ? st.v.to(p.dt) : torch::Tensor(), p.V.narrow(2, from, len));
  o.a = cat_or(st.a.defined() ? st.a.to(p.dt) : torch::Tensor(), zeros);
  o.a0 = cat_or(st.a0.defined() ? st.a0.to(p.dt) : torch::Tensor(), zeros);
  o.g = cat_or(st.g.defined() ? st.g.to(p.dt) : torch::Tensor(), p.ga.narrow(2, from, len));
  return o;
}

torch::Tensor kappa(const DotPrep& p, const torch::Tensor& x, const torch::Tensor& keys) {
  return (p.s * torch::matmul(x, keys.transpose(-1, -2))).exp();  // κ(k_j, x) = exp(s x·k_j)
}

}  // namespace
}  // namespace deep_transformer_detail

DotResult dot_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                        const torch::Tensor& s, const DotState& st0, int64_t c, int64_t chunk) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  using deep_transformer_detail::check, deep_transformer_detail::dot_append, deep_transformer_detail::dot_prep,
      deep_transformer_detail::kappa;
  check(q, k, v, log_alpha, s, c);
  auto p = dot_prep(q, k, v, log_alpha, eta, gamma, s);
  const int64_t T = q.size(1);
  DotState st = st0;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    st = dot_append(st, p, t, 1);
    const int64_t n = st.k.size(2), w0 = std::max<int64_t>(0, n - c), W = n - w0;
    auto Kw = st.k.narrow(2, w0, W);
    // e_i = Σ_j a^0_j κ(k_j, k_i) - v_i at the anchor, for the window i ∈ [t-c+1, t]
    auto E = torch::matmul(kappa(p, Kw, st.k), st.a0) - st.v.narrow(2, w0, W);
    auto step = p.et.narrow(2, t, 1).unsqueeze(-1) * st.g.narrow(2, w0, W).unsqueeze(-1) * (-p.s).exp() * E;
    auto a = p.la.narrow(2, t, 1).exp().unsqueeze(-1) * st.a;
    st.a = torch::cat({a.narrow(2, 0, w0), a.narrow(2, w0, W) - step}, 2);
    ys.push_back(torch::matmul(kappa(p, p.Q.narrow(2, t, 1), st.k), st.a));  // y_t = Σ_j a_j κ(k_j, q_t)
    if (++st.pos == chunk) {
      st.a0 = st.a;
      st.pos = 0;
    }
  }
  DotResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options());
  r.state = st;
  return r;
}

}  // namespace mnemo
