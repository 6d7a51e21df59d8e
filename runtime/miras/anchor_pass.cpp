// The Miras anchor pass and its adjoint (anchor_pass.h), line by line in reverse.
#include "runtime/miras/anchor_pass.h"

#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/kernels/node_math.h"

namespace mnemo::miras_node {

using namespace node;  // Tensor, tr, mean_last, head_sum, layer_norm_adjoint

void save_bias_options(AutogradContext* ctx, const MirasOptions& o) {
  ctx->saved_data["bias"] = o.bias;
  ctx->saved_data["p"] = o.p;
  ctx->saved_data["lp_eps"] = o.lp_eps;
  ctx->saved_data["huber_eps"] = o.huber_eps;
  ctx->saved_data["ln_eps"] = o.ln_eps;
}

MirasOptions load_bias_options(AutogradContext* ctx) {
  MirasOptions o;
  o.bias = ctx->saved_data["bias"].toStringRef();
  o.p = ctx->saved_data["p"].toDouble();
  o.lp_eps = ctx->saved_data["lp_eps"].toDouble();
  o.huber_eps = ctx->saved_data["huber_eps"].toDouble();
  o.ln_eps = ctx->saved_data["ln_eps"].toDouble();
  return o;
}

AnchorPass AnchorPass::from_saved(const std::vector<Tensor>& s, size_t at) {
  AnchorPass f;
  for (Tensor* t : {&f.G0, &f.P0, &f.P0d, &f.N0, &f.s0, &f.E, &f.Gy, &f.Gu, &f.R, &f.Dl, &f.hub}) *t = s[at++];
  return f;
}

AnchorPass anchor_forward(const Tensor& k, const Tensor& v, const Tensor& delta, const Tensor& gam, const Tensor& bet,
                          const Tensor& an0, const Tensor& an1, const MirasOptions& o) {
  AnchorPass f;
  auto H0 = chunk_matmul(k, tr(an0));
  {
    auto g = gelu_values(H0, /*with_second=*/true);
    f.G0 = g.value, f.P0 = g.grad, f.P0d = g.second;
  }
  auto U0 = chunk_matmul(f.G0, tr(an1));
  auto C0 = U0 - mean_last(U0);
  f.s0 = torch::sqrt(mean_last(C0 * C0) + o.ln_eps);
  f.N0 = C0 / f.s0;
  f.E = k + f.N0 * gam + bet - v;
  f.Gy = miras_bias_gradient(f.E, delta, o, &f.hub);
  f.Gu = layer_norm_adjoint(f.Gy * gam, f.N0, f.s0);  // γ ⊙ g_y taken back through the LN (memory_grad_terms)
  f.R = chunk_matmul(f.Gu, an1);
  f.Dl = f.R * f.P0;
  return f;
}

AnchorGrads anchor_backward(const AnchorPass& f, const Tensor& k, const Tensor& delta, const Tensor& gam,
                            const Tensor& an0, const Tensor& an1, const Tensor& gDl, const Tensor& gGu_in,
                            const Tensor& gG0_in, const MirasOptions& o) {
  AnchorGrads g;
  // Dl = (Gu Â1) ⊙ P0.
  auto gR = gDl * f.P0, gP0 = gDl * f.R;
  auto gGu = gGu_in + chunk_matmul(gR, tr(an1));
  g.an1 = chunk_matmul(tr(f.Gu), gR);
  // Gu = LN-adjoint of γ g_y at N0: Gu = (gh - mean gh - N0 mean(gh N0)) / s0, gh = γ g_y.
  auto gZ = gGu / f.s0;
  auto gs0 = -(gGu * f.Gu).sum(-1, true) / f.s0;
  auto ghg = f.Gy * gam;
  auto ggh = gZ - mean_last(gZ) - f.N0 * mean_last(gZ * f.N0);
  Tensor gN0 = -mean_last(ghg * f.N0) * gZ - mean_last(gZ * f.N0) * ghg;
  auto gGy = ggh * gam;
  g.gam = head_sum(ggh * f.Gy);
  // g_y = φ(E).
  Tensor gE;
  if (o.bias == "l2") {
    gE = gGy;
  } else if (o.bias == "lp") {
    auto w = f.E * f.E + o.lp_eps;
    gE = gGy * o.p * w.pow((o.p - 4.0) / 2.0) * (w + (o.p - 2.0) * f.E * f.E);
  } else {
    auto w = f.E * f.E + o.huber_eps;
    auto dl = delta.unsqueeze(-1);
    gE = gGy * (f.hub + (1.0 - f.hub) * dl * o.huber_eps / (w * w.sqrt()));
    g.delta = (gGy * (1.0 - f.hub) * f.E / w.sqrt()).sum(-1);
  }
  // E = K + N0 ⊙ γ + β - V.
  g.v = -gE;
  gN0 = gN0 + gE * gam;
  g.gam = g.gam + head_sum(gE * f.N0);
  g.bet = head_sum(gE);
  // N0 = LN(U0) with the extra s0 path of Gu.
  auto gs0t = gs0 - (gN0 * f.N0).sum(-1, true) / f.s0;
  auto gC0 = gN0 / f.s0 + gs0t * f.N0 / static_cast<double>(f.N0.size(-1));
  auto gU0 = gC0 - mean_last(gC0);
  auto gG0 = gG0_in + chunk_matmul(gU0, an1);
  g.an1 = g.an1 + chunk_matmul(tr(gU0), f.G0);
  auto gH0 = gG0 * f.P0 + gP0 * f.P0d;
  g.k = gE + chunk_matmul(gH0, an0);
  g.an0 = chunk_matmul(tr(gH0), k);
  return g;
}

}  // namespace mnemo::miras_node
