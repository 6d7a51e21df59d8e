// One Miras dual-form segment as one autograd node (fused_segment.h): the node and its tensor form (the kernel form
// is fused_segment_kernel.cpp). The backward is the adjoint of each line of the forward, in reverse.
#include "runtime/miras/fused_segment.h"

#include <cmath>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/kernels/node_math.h"
#include "runtime/kernels/precision.h"
#include "runtime/miras/anchor_pass.h"

namespace mnemo {

namespace {

using namespace node;  // Tensor, tr, mean_last, head_sum, layer_norm_adjoint (runtime/kernels/node_math.h)
using miras_node::AnchorPass;
using miras_node::to_gate;


// Inputs in apply() order; DELTA, SC0, SC1 are empty placeholders where absent.
enum In { Q, K, V, LA, ETA, DELTA, GAM, BET, AN0, AN1, W0, W1, SC0, SC1, kInputs };
struct Params {
  MirasOptions o;  // bias, p, lp_eps, huber_eps, ln_eps
  bool scaled = false;
};

struct Forward {
  Tensor out, w0, w1;                                        // outputs
  AnchorPass a;                                              // the inner gradient's terms at Â (anchor_pass.h)
  Tensor bn, eb, ebi, Qe, ke, kei, ge, gei, mask, A0, h, Ga, Pa, S1, uu, u, nrm, s;  // read-out
  Tensor gl, el, keep;                                       // segment end (keep: where b_n - b ≤ 0)
};

Forward run_forward(const variable_list& in, const Params& pr) {
  Forward f;
  const auto &q = in[Q], &k = in[K], &gam = in[GAM], &bet = in[BET];
  const int64_t n = q.size(2);
  // Anchor pass: rank-1 terms (cols Dl, Gu; rows K, G0) of the inner gradient at Â (memory.h memory_grad_terms).
  f.a = miras_node::anchor_forward(k, in[V], in[DELTA], gam, bet, in[AN0], in[AN1], pr.o);
  const auto &Gu = f.a.Gu, &G0 = f.a.G0, &Dl = f.a.Dl;
  // Decays (in-segment cumulative log α, factorised: the caller checked the span).
  f.bn = in[LA].cumsum(2);
  f.eb = f.bn.exp();
  f.ebi = (-f.bn).exp();
  f.Qe = q * f.eb;
  f.ke = k * in[ETA];
  f.kei = f.ke * f.ebi;
  f.ge = Gu * in[ETA];
  f.gei = f.ge * f.ebi;
  f.mask = causal_mask(n, q.device()).to(q.scalar_type());
  // Read-out, layer W_2 then layer W_1.
  f.A0 = chunk_matmul(f.Qe, tr(f.kei)) * f.mask;
  f.h = chunk_matmul(f.Qe, tr(in[W0])) - chunk_matmul(f.A0, Dl);
  {
    auto g = gelu_values(pr.scaled ? f.h * in[SC0] : f.h);
    f.Ga = g.value, f.Pa = g.grad;
  }
  f.S1 = chunk_matmul(f.Ga, tr(G0)) * f.mask;
  f.uu = chunk_matmul(f.Ga, tr(in[W1])) - chunk_matmul(f.S1, f.gei);
  f.u = f.eb * f.uu;
  auto us = pr.scaled ? f.u * in[SC1] : f.u;
  auto c = us - mean_last(us);
  f.s = torch::sqrt(mean_last(c * c) + pr.o.ln_eps);
  f.nrm = c / f.s;
  f.out = q + f.nrm * gam + bet;
  // Weights after the last token: Γ_{n-1, s} = exp(b_{n-1} - b_s).
  auto bl = f.bn.narrow(2, n - 1, 1);  // [B, H, 1, G]
  auto dif = bl - f.bn;
  f.keep = (dif <= 0).to(q.scalar_type());
  f.gl = dif.clamp_max(0.0).exp();
  f.el = bl.exp();
  f.w0 = in[W0] * f.el - chunk_matmul(tr(Dl), f.ke * f.gl);
  f.w1 = tr(f.el) * in[W1] - chunk_matmul(tr(f.ge * f.gl), G0);
  return f;
}

// The node's inputs by name (the kernel form's view); the placeholders of absent inputs stay undefined.
MirasSegmentInputs segment_inputs(const variable_list& in, const MirasOptions& o, bool scaled) {
  MirasSegmentInputs x{in[Q],   in[K],   in[V],   in[LA],  in[ETA], o.bias == "huber" ? in[DELTA] : Tensor(),
                       in[GAM], in[BET], {in[AN0], in[AN1]},       {in[W0], in[W1]},
                       scaled ? in[SC0] : Tensor(),                scaled ? in[SC1] : Tensor()};
  return x;
}

struct MirasSegmentFn : torch::autograd::Function<MirasSegmentFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const std::string& bias, double p,
                               double lp_eps, double huber_eps, double ln_eps, bool scaled) {
    const variable_list in(inputs.begin(), inputs.end());
    Params pr;
    pr.o.bias = bias, pr.o.p = p, pr.o.lp_eps = lp_eps, pr.o.huber_eps = huber_eps, pr.o.ln_eps = ln_eps;
    pr.scaled = scaled;
    miras_node::save_bias_options(ctx, pr.o);
    ctx->saved_data["scaled"] = scaled;
    const auto x = segment_inputs(in, pr.o, scaled);
    const bool kernel = miras_segment_kernel::eligible(x, pr.o);
    ctx->saved_data["kernel"] = kernel;
    // The kernel's products in bf16 under a bf16 run on CUDA (runtime/kernels/precision.h); the backward, which
    // autograd may run on another thread after the autocast scope, takes the forward's choice.
    const bool bf16_products = kernel && bf16_products_enabled();  // (the kernel takes it for fp32 inputs only)
    ctx->saved_data["bf16_products"] = bf16_products;
    if (kernel) {  // the CUDA kernel (or its block code over the host grid) keeps its own intermediates
      auto k = miras_segment_kernel::forward(x, pr.o, bf16_products);
      variable_list save(in);
      save.insert(save.end(), k.saved.begin(), k.saved.end());
      ctx->save_for_backward(save);
      return {k.out.out, k.out.end[0], k.out.end[1]};
    }
    auto f = run_forward(in, pr);
    variable_list save(in);
    for (const auto& t : f.a.saved()) save.push_back(t);
    for (const Tensor* t : {&f.bn, &f.eb, &f.ebi, &f.Qe, &f.ke, &f.kei, &f.ge, &f.gei, &f.mask, &f.A0, &f.h, &f.Ga,
                            &f.Pa, &f.S1, &f.uu, &f.u, &f.nrm, &f.s, &f.gl, &f.el, &f.keep})
      save.push_back(*t);
    ctx->save_for_backward(save);
    return {f.out, f.w0, f.w1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const MirasOptions o = miras_node::load_bias_options(ctx);
    const bool scaled = ctx->saved_data["scaled"].toBool();
    const auto sv = ctx->get_saved_variables();
    const variable_list in(sv.begin(), sv.begin() + kInputs);
    if (ctx->saved_data["kernel"].toBool()) {
      const std::vector<Tensor> saved(sv.begin() + kInputs, sv.end());
      const auto k = miras_segment_kernel::backward(segment_inputs(in, o, scaled), saved, go[0], go[1], go[2], o,
                                                    ctx->saved_data["bf16_products"].toBool());
      variable_list g(kInputs + 6);  // + bias, p, lp_eps, huber_eps, ln_eps, scaled
      g[Q] = k.q, g[K] = k.k, g[V] = k.v, g[LA] = k.log_alpha, g[ETA] = k.eta, g[DELTA] = k.delta;
      g[GAM] = k.gamma, g[BET] = k.beta, g[AN0] = k.anchor[0], g[AN1] = k.anchor[1], g[W0] = k.cur[0];
      g[W1] = k.cur[1], g[SC0] = k.scale0, g[SC1] = k.scale1;
      return g;
    }
    Forward f;
    f.a = AnchorPass::from_saved(sv, kInputs);
    size_t i = kInputs + AnchorPass::kSaved;
    for (Tensor* t : {&f.bn, &f.eb, &f.ebi, &f.Qe, &f.ke, &f.kei, &f.ge, &f.gei, &f.mask, &f.A0, &f.h, &f.Ga, &f.Pa,
                      &f.S1, &f.uu, &f.u, &f.nrm, &f.s, &f.gl, &f.el, &f.keep})
      *t = sv[i++];
    const auto &Gu = f.a.Gu, &G0 = f.a.G0, &Dl = f.a.Dl;
    const auto &q = in[Q], &k = in[K], &gam = in[GAM], &eta = in[ETA];
    const int64_t n = q.size(2), G = in[LA].size(-1);
    const Tensor gout = or_zeros(go[0], q), gw0e = or_zeros(go[1], in[W0]),
                 gw1e = or_zeros(go[2], in[W1]);
    variable_list g(kInputs + 6);  // + bias, p, lp_eps, huber_eps, ln_eps, scaled

    // Segment end: W0' = W0 ⊙ e^{b_n} - Dlᵀ (K_η ⊙ gl),  W1' = e^{b_n}ᵀ ⊙ W1 - (Gu_η ⊙ gl)ᵀ G0.
    g[W0] = gw0e * f.el;
    g[W1] = tr(f.el) * gw1e;
    auto gel = (gw0e * in[W0]).sum(-2, true) + tr((gw1e * in[W1]).sum(-1, true));  // [B, H, 1, d]
    auto T0 = f.ke * f.gl, T1 = f.ge * f.gl;
    Tensor gDl = -chunk_matmul(T0, tr(gw0e));
    auto gT0 = -chunk_matmul(Dl, gw0e);
    auto gT1 = -chunk_matmul(G0, tr(gw1e));
    Tensor gG0 = -chunk_matmul(T1, gw1e);
    Tensor gke = gT0 * f.gl, gge = gT1 * f.gl;
    auto gdif = (gT0 * f.ke + gT1 * f.ge) * f.gl * f.keep;
    Tensor gbl = to_gate(gel * f.el, G) + to_gate(gdif, G).sum(2, true);  // [B, H, 1, G]
    Tensor gbn = -to_gate(gdif, G);

    // Output LayerNorm: out = Q + nrm ⊙ γ + β.
    Tensor gq = gout;
    Tensor ggam = head_sum(gout * f.nrm), gbet = head_sum(gout);
    auto gus = layer_norm_adjoint(gout * gam, f.nrm, f.s);
    Tensor gu = gus;
    if (scaled) {
      g[SC1] = (gus * f.u).sum(at::IntArrayRef{-2, -1}, true);
      gu = gus * in[SC1];
    }
    // u = e^b ⊙ (Ga W1ᵀ - S1 gei).
    Tensor geb = gu * f.uu;
    auto guu = gu * f.eb;
    auto gS1 = -chunk_matmul(guu, tr(f.gei)) * f.mask;
    auto ggei = -chunk_matmul(tr(f.S1), guu);
    auto gGa = chunk_matmul(guu, in[W1]) + chunk_matmul(gS1, G0);
    g[W1] = g[W1] + chunk_matmul(tr(guu), f.Ga);
    gG0 = gG0 + chunk_matmul(tr(gS1), f.Ga);
    gge = gge + ggei * f.ebi;
    Tensor gebi = ggei * f.ge;
    // Ga = GELU(σ0 h);  h = Qe W0ᵀ - A0 Dl.
    auto gh = gGa * f.Pa;
    if (scaled) {
      g[SC0] = (gh * f.h).sum(at::IntArrayRef{-2, -1}, true);
      gh = gh * in[SC0];
    }
    auto gA0 = -chunk_matmul(gh, tr(Dl)) * f.mask;
    gDl = gDl - chunk_matmul(tr(f.A0), gh);
    auto gQe = chunk_matmul(gh, in[W0]) + chunk_matmul(gA0, f.kei);
    g[W0] = g[W0] + chunk_matmul(tr(gh), f.Qe);
    auto gkei = chunk_matmul(tr(gA0), f.Qe);
    gke = gke + gkei * f.ebi;
    gebi = gebi + gkei * f.ke;
    gq = gq + gQe * f.eb;
    geb = geb + gQe * q;
    // Gates: K_η = K ⊙ η, Gu_η = Gu ⊙ η, e^{±b}, b = cumsum(log α).
    Tensor gGu = gge * eta;
    Tensor gk = gke * eta;
    g[ETA] = to_gate(gge * Gu + gke * k, G);
    gbn = gbn + to_gate(geb * f.eb - gebi * f.ebi, G);
    gbn = gbn + torch::constant_pad_nd(gbl, {0, 0, n - 1, 0});  // b_n is the last row of b
    g[LA] = gbn.flip(2).cumsum(2).flip(2);

    // Anchor pass, in reverse (anchor_pass.h).
    auto ag = miras_node::anchor_backward(f.a, k, in[DELTA], gam, in[AN0], in[AN1], gDl, gGu, gG0, o);
    gk = gk + ag.k;
    g[V] = ag.v;
    g[DELTA] = ag.delta;
    ggam = ggam + ag.gam;
    gbet = gbet + ag.bet;
    g[AN0] = ag.an0;
    g[AN1] = ag.an1;
    g[Q] = gq;
    g[K] = gk;
    g[GAM] = ggam.sum_to_size(gam.sizes());
    g[BET] = gbet.sum_to_size(in[BET].sizes());
    // Weights broadcast over the batch (the learned initial state) take the summed gradient.
    g[W0] = g[W0].sum_to_size(in[W0].sizes());
    g[W1] = g[W1].sum_to_size(in[W1].sizes());
    g[AN0] = g[AN0].sum_to_size(in[AN0].sizes());
    g[AN1] = g[AN1].sum_to_size(in[AN1].sizes());
    return g;
  }
};

}  // namespace

MirasSegmentOutput miras_fused_segment(const MirasSegmentInputs& x, const MirasOptions& o) {
  if (x.anchor.size() != 2 || x.cur.size() != 2) throw Error("miras fused segment: the memory has 2 weight matrices");
  const bool scaled = x.scale0.defined();
  // LibTorch 1.13's custom Function cannot take undefined inputs: absent ones are empty placeholders.
  const auto none = torch::empty({0}, x.q.options());
  variable_list in = {x.q,           x.k,           x.v,           x.log_alpha,   x.eta,
                      o.bias == "huber" ? x.delta : none, x.gamma, x.beta,     x.anchor[0], x.anchor[1],
                      x.cur[0],      x.cur[1],      scaled ? x.scale0 : none,     scaled ? x.scale1 : none};
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = MirasSegmentFn::apply(at::TensorList(in), o.bias, o.p, o.lp_eps, o.huber_eps, o.ln_eps, scaled);
  } else if (miras_segment_kernel::eligible(x, o)) {
    return miras_segment_kernel::forward(x, o, bf16_products_enabled()).out;
  } else {
    auto f = run_forward(in, Params{o, scaled});
    out = {f.out, f.w0, f.w1};
  }
  return {out[0], {out[1], out[2]}};
}

}  // namespace mnemo
