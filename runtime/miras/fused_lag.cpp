// Memora's lag token as one autograd node (fused_lag.h). The backward is the adjoint of each line of the forward, in
// reverse; the anchor pass's adjoint is shared with the segment node (anchor_pass.h).
#include "runtime/miras/fused_lag.h"

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/gelu.h"
#include "runtime/kernels/node_math.h"
#include "runtime/miras/anchor_pass.h"
#include "runtime/miras/fused_lag_cpu.h"

namespace mnemo {

namespace {

using namespace node;  // Tensor, tr, mean_last, head_sum, layer_norm_adjoint
using miras_node::AnchorPass;
using miras_node::to_gate;


using namespace miras_lag;  // the inputs' order In (fused_lag_cpu.h)

// The inner gradient's outer products ∇W0 = Dlᵀ k, ∇W1 = Guᵀ G0 and the clamped logs of the weights: recomputed in
// the backward rather than kept (four weight-sized arrays per lag token).
struct Logits {
  Tensor M0, M1, lg0, lg1;
};
Logits logit_terms(const variable_list& in, const AnchorPass& a, double floor) {
  return {chunk_matmul(tr(a.Dl), in[K]), chunk_matmul(tr(a.Gu), a.G0), in[W0].clamp_min(floor).log(),
          in[W1].clamp_min(floor).log()};
}

struct Forward {
  AnchorPass a;
  Tensor alpha, w0, w1;  // e^{log α}; the new weights
  Tensor Ga, Pa, nrm, s, out;  // read-out: GELU(h), GELU'(h), LN(u) and its scale
};

Forward run_forward(const variable_list& in, const MirasOptions& o) {
  Forward f;
  f.a = miras_node::anchor_forward(in[K], in[V], in[DELTA], in[GAM], in[BET], in[W0], in[W1], o);
  const auto lt = logit_terms(in, f.a, o.kl_floor);
  f.alpha = in[LA].exp();
  f.w0 = torch::softmax(f.alpha * lt.lg0 - in[ETA] * lt.M0, -1);
  f.w1 = torch::softmax(tr(f.alpha) * lt.lg1 - tr(in[ETA]) * lt.M1, -1);
  {
    auto g = gelu_values(chunk_matmul(in[Q], tr(f.w0)));
    f.Ga = g.value, f.Pa = g.grad;
  }
  auto u = chunk_matmul(f.Ga, tr(f.w1));
  auto c = u - mean_last(u);
  f.s = torch::sqrt(mean_last(c * c) + o.ln_eps);
  f.nrm = c / f.s;
  f.out = in[Q] + f.nrm * in[GAM] + in[BET];
  return f;
}

struct MirasLagFn : torch::autograd::Function<MirasLagFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const std::string& bias, double p,
                               double lp_eps, double huber_eps, double ln_eps, double kl_floor) {
    const variable_list in(inputs.begin(), inputs.end());
    MirasOptions o;
    o.bias = bias, o.p = p, o.lp_eps = lp_eps, o.huber_eps = huber_eps, o.ln_eps = ln_eps, o.kl_floor = kl_floor;
    miras_node::save_bias_options(ctx, o);
    ctx->saved_data["kl_floor"] = kl_floor;
    const bool cpu = fused_cpu_eligible(in);
    ctx->saved_data["cpu"] = cpu;
    if (cpu) {  // the CPU form (fused_lag_cpu.h) keeps the old weights' logs; the rest it recomputes
      auto f = forward_cpu(in, o);
      variable_list save(in);
      for (const Tensor* t : {&f.w0, &f.w1, &f.lg0, &f.lg1}) save.push_back(*t);
      ctx->save_for_backward(save);
      return {f.out, f.w0, f.w1};
    }
    auto f = run_forward(in, o);
    variable_list save(in);
    for (const auto& t : f.a.saved()) save.push_back(t);
    for (const Tensor* t : {&f.alpha, &f.w0, &f.w1, &f.Ga, &f.Pa, &f.nrm, &f.s}) save.push_back(*t);
    ctx->save_for_backward(save);
    return {f.out, f.w0, f.w1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    auto o = miras_node::load_bias_options(ctx);
    o.kl_floor = ctx->saved_data["kl_floor"].toDouble();
    const auto sv = ctx->get_saved_variables();
    const variable_list in(sv.begin(), sv.begin() + kInputs);
    if (ctx->saved_data["cpu"].toBool()) {
      CpuForward f{Tensor(), sv[kInputs], sv[kInputs + 1], sv[kInputs + 2], sv[kInputs + 3]};
      auto g = backward_cpu(in, f, go[0], go[1], go[2], o);
      g.resize(kInputs + 6);  // + bias, p, lp_eps, huber_eps, ln_eps, kl_floor
      g[W0] = g[W0].sum_to_size(in[W0].sizes());
      g[W1] = g[W1].sum_to_size(in[W1].sizes());
      return g;
    }
    Forward f;
    f.a = AnchorPass::from_saved(sv, kInputs);
    size_t i = kInputs + AnchorPass::kSaved;
    for (Tensor* t : {&f.alpha, &f.w0, &f.w1, &f.Ga, &f.Pa, &f.nrm, &f.s}) *t = sv[i++];
    const auto &q = in[Q], &k = in[K], &gam = in[GAM], &eta = in[ETA];
    const int64_t G = in[LA].size(-1);
    const Tensor gout = or_zeros(go[0], q);
    Tensor gw0 = or_zeros(go[1], f.w0), gw1 = or_zeros(go[2], f.w1);
    variable_list g(kInputs + 6);  // + bias, p, lp_eps, huber_eps, ln_eps, kl_floor

    // Read-out: out = q + LN(u) ⊙ γ + β, u = GELU(q W0'ᵀ) W1'ᵀ.
    Tensor gq = gout;
    Tensor ggam = head_sum(gout * f.nrm), gbet = head_sum(gout);
    auto gu = layer_norm_adjoint(gout * gam, f.nrm, f.s);
    gw1 = gw1 + chunk_matmul(tr(gu), f.Ga);
    auto gh = chunk_matmul(gu, f.w1) * f.Pa;
    gw0 = gw0 + chunk_matmul(tr(gh), q);
    gq = gq + chunk_matmul(gh, f.w0);
    // Row-wise softmax: L̄ = W' ⊙ (W̄' - Σ_row W̄' ⊙ W').
    auto gL0 = f.w0 * (gw0 - (gw0 * f.w0).sum(-1, true));
    auto gL1 = f.w1 * (gw1 - (gw1 * f.w1).sum(-1, true));
    // L0 = a ⊙ lg0 - η ⊙ M0 (gates on columns), L1 = aᵀ ⊙ lg1 - ηᵀ ⊙ M1 (gates on rows).
    const auto lt = logit_terms(in, f.a, o.kl_floor);
    auto per_channel = [&](const Tensor& x0, const Tensor& x1) {  // [B, H, 1, G] from column sums and row sums
      return to_gate(x0.sum(-2, true) + tr(x1.sum(-1, true)), G);
    };
    g[LA] = per_channel(gL0 * lt.lg0, gL1 * lt.lg1) * f.alpha;
    g[ETA] = -per_channel(gL0 * lt.M0, gL1 * lt.M1);
    auto gM0 = -(eta * gL0), gM1 = -(tr(eta) * gL1);
    // log max(W, floor): 1/W where W ≥ floor, else 0 (as clamp_min's backward).
    auto log_clamp_adjoint = [&](const Tensor& gl, const Tensor& w) {
      return gl * (w >= o.kl_floor).to(w.scalar_type()) / w.clamp_min(o.kl_floor);
    };
    g[W0] = log_clamp_adjoint(f.alpha * gL0, in[W0]);
    g[W1] = log_clamp_adjoint(tr(f.alpha) * gL1, in[W1]);
    // M0 = Dlᵀ k, M1 = Guᵀ G0.
    auto gDl = chunk_matmul(k, tr(gM0));
    Tensor gk = chunk_matmul(f.a.Dl, gM0);
    auto gGu = chunk_matmul(f.a.G0, tr(gM1));
    auto gG0 = chunk_matmul(f.a.Gu, gM1);
    // Anchor pass at W, in reverse (anchor_pass.h).
    auto ag = miras_node::anchor_backward(f.a, k, in[DELTA], gam, in[W0], in[W1], gDl, gGu, gG0, o);
    g[Q] = gq;
    g[K] = gk + ag.k;
    g[V] = ag.v;
    g[DELTA] = ag.delta;
    g[GAM] = (ggam + ag.gam).sum_to_size(gam.sizes());
    g[BET] = (gbet + ag.bet).sum_to_size(in[BET].sizes());
    g[W0] = (g[W0] + ag.an0).sum_to_size(in[W0].sizes());
    g[W1] = (g[W1] + ag.an1).sum_to_size(in[W1].sizes());
    return g;
  }
};

}  // namespace

MirasLagOutput miras_fused_lag(const MirasLagInputs& x, const MirasOptions& o) {
  if (x.cur.size() != 2) throw Error("miras fused lag token: the memory has 2 weight matrices");
  // LibTorch 1.13's custom Function cannot take undefined inputs: an absent delta is an empty placeholder.
  const auto none = torch::empty({0}, x.q.options());
  variable_list in = {x.q,    x.k,     x.v,         x.log_alpha, x.eta, o.bias == "huber" ? x.delta : none,
                      x.gamma, x.beta, x.cur[0],    x.cur[1]};
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = MirasLagFn::apply(at::TensorList(in), o.bias, o.p, o.lp_eps, o.huber_eps, o.ln_eps, o.kl_floor);
  } else if (fused_cpu_eligible(in)) {
    auto f = forward_cpu(in, o);
    out = {f.out, f.w0, f.w1};
  } else {
    auto f = run_forward(in, o);
    out = {f.out, f.w0, f.w1};
  }
  return {out[0], {out[1], out[2]}};
}

}  // namespace mnemo
