// One chunk of the deep-memory dual form as one autograd node with a hand-written backward (fused_chunk.h): the node
// and its tensor form (the CPU form is fused_chunk_cpu.cpp). The backward is the adjoint of each line of the forward,
// in reverse.
#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/deep_memory/fused_chunk_forms.h"

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/kernels/node_math.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace {

using namespace node;  // Tensor, tr (runtime/kernels/node_math.h)
using namespace fused_chunk_forms;  // In, ClipSaved, Forward, the CPU form

Tensor col(const Tensor& x) { return x.unsqueeze(-1); }                   // [.., n] -> [.., n, 1]
Tensor mat(const Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); }     // [B, H] -> [B, H, 1, 1]
Tensor rowsum(const Tensor& a, const Tensor& b) { return (a * b).sum(-1); }
Tensor scal(const Tensor& a, const Tensor& b) { return (a * b).sum({-2, -1}); }  // ⟨a, b⟩ -> [B, H]

// The inner-gradient clip (memory.h clip_grad_terms), forward and adjoint, per term row:
//   c0 = f Δ, c1 = f g_y (ClipSaved);  s̄2 = 2 s̄ = -τ f̄ s^{-3/2} where s ≥ τ² (clamp_min's rule) else 0,
//   f̄ = ⟨c̄0, Δ⟩ + ⟨c̄1, g_y⟩:  Δ̄ = f c̄0 + s̄2 kk Δ,  ḡ_y = f c̄1 + s̄2 gg g_y,  φ̄k += s̄2 dd φk,  Ḡ0 += s̄2 ee G0.
std::pair<Tensor, Tensor> clip_forward(const Tensor& kf, const Tensor& Dl, const Tensor& E, const Tensor& G0,
                                       double tau, ClipSaved& sv) {
  sv.kk = kf.square().sum(-1), sv.dd = Dl.square().sum(-1), sv.ee = E.square().sum(-1), sv.gg = G0.square().sum(-1);
  sv.s = sv.dd * sv.kk + sv.ee * sv.gg;
  sv.f = torch::clamp_min(sv.s, tau * tau).rsqrt_().mul_(tau);
  return {Dl * col(sv.f), E * col(sv.f)};
}

// In place: gc0 becomes Δ̄, gc1 ḡ_y; gkf and gG0 accumulate.
void clip_backward(Tensor& gc0, Tensor& gc1, const Tensor& Dl, const Tensor& E, const Tensor& kf, const Tensor& G0,
                   const ClipSaved& sv, double tau, Tensor& gkf, Tensor& gG0) {
  auto gf = rowsum(gc0, Dl) + rowsum(gc1, E);
  auto gs2 = torch::where(sv.s >= tau * tau, gf * (-tau) * sv.s.pow(-1.5), torch::zeros_like(gf));
  gc0.mul_(col(sv.f)).addcmul_(col(gs2 * sv.kk), Dl);
  gkf.addcmul_(col(gs2 * sv.dd), kf);
  gc1.mul_(col(sv.f)).addcmul_(col(gs2 * sv.gg), E);
  gG0.addcmul_(col(gs2 * sv.ee), G0);
}

// Row scalings are applied to the narrower operand of each product: diag(a) (x Wᵀ) = (diag(a) x) Wᵀ, so layer 0
// (x = φ(q), f wide) and the chunk-end products scale [n, f] or [N, d] rows, never the [n, hid] ones.
Forward run_forward(const variable_list& in, bool mom, bool l2, double tau) {
  Forward o;
  const auto &q = in[Q], &qf = in[QF], &k = in[K], &kf = in[KF], &v = in[V];
  // Anchor pass: the inner gradients at Â as rank-1 terms (memory.h memory_grad_terms).
  auto H0 = chunk_matmul(kf, tr(in[A0]));
  auto g0 = gelu_values(H0, /*with_second=*/true);
  o.G0 = g0.value, o.P0 = g0.grad;
  o.E = l2 ? (chunk_matmul(o.G0, tr(in[A1])) += k) -= v : -v;
  auto R = chunk_matmul(o.E, in[A1]);
  o.Dl = R * o.P0;
  o.RP0d = R.mul_(g0.second);
  if (tau > 0) {  // memory.h clip_grad_terms
    std::tie(o.c0, o.c1) = clip_forward(kf, o.Dl, o.E, o.G0, tau, o.clip);
  } else {
    o.c0 = o.Dl, o.c1 = o.E;
  }
  // Read-out through the per-token weights, layer 0 then layer 1:
  //   H = (A⊙φq) W0ᵀ + (D⊙φq) S0ᵀ - (C ⊙ φq φkᵀ) c0,   y = q + A⊙(Ga W1ᵀ) + D⊙(Ga S1ᵀ) - (C ⊙ Ga G0ᵀ) c1.
  const auto &A = in[CA], &D = in[CD], &C = in[CC];
  o.QK = chunk_matmul(qf, tr(kf));
  auto H = chunk_matmul(col(A) * qf, tr(in[W0]));
  if (mom) H += chunk_matmul(col(D) * qf, tr(in[S0]));
  H -= chunk_matmul(C * o.QK, o.c0);
  auto ga = gelu_values(H);
  o.Ga = ga.value, o.Pa = ga.grad;
  o.X1 = chunk_matmul(o.Ga, tr(in[W1]));
  o.GG = chunk_matmul(o.Ga, tr(o.G0));
  o.y = torch::addcmul(q, col(A), o.X1);
  if (mom) {
    o.M1 = chunk_matmul(o.Ga, tr(in[S1]));
    o.y.addcmul_(col(D), o.M1);
  }
  o.y -= chunk_matmul(C * o.GG, o.c1);
  // Chunk-end weights and momentum: W0' = a W0 + d S0 - c0ᵀ (c_end ⊙ φk), W1' = a W1 + d S1 - (c_end ⊙ c1)ᵀ G0.
  auto ce = col(in[CE]);
  o.w0 = mat(in[AE]) * in[W0] - chunk_matmul(tr(o.c0), ce * kf);
  o.w1 = mat(in[AE]) * in[W1] - chunk_matmul(tr(o.c1 * ce), o.G0);
  if (mom) {
    auto ee = col(in[EE]);
    o.w0.addcmul_(mat(in[DE]), in[S0]);
    o.w1.addcmul_(mat(in[DE]), in[S1]);
    o.s0 = mat(in[PE]) * in[S0] - chunk_matmul(tr(o.c0), ee * kf);
    o.s1 = mat(in[PE]) * in[S1] - chunk_matmul(tr(o.c1 * ee), o.G0);
  }
  return o;
}

// Adjoint of out = A⊙(x Wᵀ) + D⊙(x Sᵀ) - (C ⊙ x rᵀ) c (one read-out layer; XR = x rᵀ from the forward). With
// X = x Wᵀ and M = x Sᵀ from the forward (out narrower than x) the row scalings act on ō; without them (x narrower)
// on x and on ō W:  Ā = rowsum(ō ⊙ X) = rowsum((ō W) ⊙ x),  x̄ = (A⊙ō) W = A⊙(ō W),  W̄ = (A⊙ō)ᵀ x = ōᵀ (A⊙x).
// Accumulates into gA, gD, gC; returns the gradients of x, W, S, r, c.
struct LayerGrads {
  Tensor x, W, S, r, c;
};
LayerGrads readout_layer_backward(const Tensor& go, const Tensor& x, const Tensor& W, const Tensor& S,
                                  const Tensor& r, const Tensor& c, const Tensor& X, const Tensor& M,
                                  const Tensor& XR, const Tensor& A, const Tensor& D, const Tensor& C, Tensor& gA,
                                  Tensor& gD, Tensor& gC) {
  LayerGrads g;
  const bool mom = S.defined();
  if (X.defined()) {
    gA += rowsum(go, X);
    auto oA = col(A) * go;
    g.x = chunk_matmul(oA, W);
    g.W = chunk_matmul(tr(oA), x);
    if (mom) {
      gD += rowsum(go, M);
      auto oD = col(D) * go;
      g.x += chunk_matmul(oD, S);
      g.S = chunk_matmul(tr(oD), x);
    }
  } else {
    auto PW = chunk_matmul(go, W);
    gA += rowsum(PW, x);
    g.x = PW.mul_(col(A));
    g.W = chunk_matmul(tr(go), col(A) * x);
    if (mom) {
      auto PS = chunk_matmul(go, S);
      gD += rowsum(PS, x);
      g.x.addcmul_(col(D), PS);
      g.S = chunk_matmul(tr(go), col(D) * x);
    }
  }
  auto gSc = chunk_matmul(go, tr(c)).neg_();  // ∂/∂(C ⊙ x rᵀ)
  gC.addcmul_(gSc, XR);
  auto gXR = gSc.mul_(C);
  g.c = chunk_matmul(tr(C * XR), go).neg_();
  g.x += chunk_matmul(gXR, r);
  g.r = chunk_matmul(tr(gXR), x);
  return g;
}

// The node's forms (fused_chunk.h): the kernel form where it applies, else the CPU form, else the tensor form.
enum class Form : int64_t { tensor, cpu, kernel };

Form form_for(const variable_list& in, bool mom) {
  if (kernel_form_eligible(in, mom)) return Form::kernel;
  return cpu_form_eligible(in, mom) ? Form::cpu : Form::tensor;
}

Forward forward_any(const variable_list& in, bool mom, bool l2, double tau, Form form, bool bf16_products) {
  switch (form) {
    case Form::kernel: return kernel_forward(in, mom, l2, tau, bf16_products);
    case Form::cpu: return cpu_forward(in, mom, l2, tau);
    case Form::tensor: break;
  }
  return run_forward(in, mom, l2, tau);
}

// The kernel's products in bf16 under a bf16 run on CUDA (runtime/kernels/precision.h), fp32 inputs only.
bool bf16_products_for(const variable_list& in, Form form) {
  return form == Form::kernel && in[Q].scalar_type() == torch::kFloat32 && bf16_products_enabled();
}

struct FusedChunkFn : torch::autograd::Function<FusedChunkFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, bool mom, bool l2, double tau) {
    const variable_list in(inputs.begin(), inputs.end());
    const Form form = form_for(in, mom);
    const bool bf16_products = bf16_products_for(in, form);  // the backward, maybe on another thread, takes it too
    auto o = forward_any(in, mom, l2, tau, form, bf16_products);
    ctx->saved_data["form"] = static_cast<int64_t>(form);
    ctx->saved_data["bf16_products"] = bf16_products;
    ctx->saved_data["mom"] = mom;
    ctx->saved_data["l2"] = l2;
    ctx->saved_data["tau"] = tau;
    variable_list save(in);
    const ClipSaved& c = o.clip;
    for (const Tensor* t : std::initializer_list<const Tensor*>{&o.P0, &o.G0, &o.E, &o.RP0d, &o.Dl, &c.f, &c.s, &c.kk,
                                                                &c.dd, &c.ee, &c.gg, &o.c0, &o.c1, &o.QK, &o.X1,
                                                                &o.M1, &o.GG, &o.Ga, &o.Pa})
      save.push_back(*t);
    save[V] = Tensor();  // not needed by the backward
    ctx->save_for_backward(save);
    if (mom) return {o.y, o.w0, o.w1, o.s0, o.s1};
    return {o.y, o.w0, o.w1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const bool l2 = ctx->saved_data["l2"].toBool();
    const double tau = ctx->saved_data["tau"].toDouble();
    const auto sv = ctx->get_saved_variables();
    const variable_list in(sv.begin(), sv.begin() + kInputs);
    Forward f;
    size_t i = kInputs;
    auto& c = f.clip;
    for (Tensor* t : {&f.P0, &f.G0, &f.E, &f.RP0d, &f.Dl, &c.f, &c.s, &c.kk, &c.dd, &c.ee, &c.gg, &f.c0, &f.c1, &f.QK,
                      &f.X1, &f.M1, &f.GG, &f.Ga, &f.Pa})
      *t = sv[i++];
    const bool mom = ctx->saved_data["mom"].toBool();
    const auto form = static_cast<Form>(ctx->saved_data["form"].toInt());
    if (form != Form::tensor) {
      const bool bf16_products = ctx->saved_data["bf16_products"].toBool();
      auto g = form == Form::kernel ? kernel_backward(in, f, go, mom, l2, tau, bf16_products)
                                    : cpu_backward(in, f, go, mom, l2, tau);
      g.resize(kInputs + 3);  // + mom, l2, tau
      return g;
    }
    const auto &q = in[Q], &qf = in[QF], &kf = in[KF];
    const Tensor gy = or_zeros(go[0], q), gw0 = or_zeros(go[1], in[W0]), gw1 = or_zeros(go[2], in[W1]);
    const Tensor gs0 = mom ? or_zeros(go[3], in[S0]) : Tensor(), gs1 = mom ? or_zeros(go[4], in[S1]) : Tensor();

    variable_list g(kInputs + 3);  // + mom, l2, tau; no gradient for the empty placeholders
    // Chunk end: W0' = a W0 + d S0 - c0ᵀ (c_end ⊙ φk), W1' = a W1 + d S1 - (c_end ⊙ c1)ᵀ G0, and S_l' likewise with
    // p and e_end. So c̄0 = -(c_end ⊙ φk) W̄0ᵀ, φ̄k = -c_end ⊙ (c0 W̄0), c̄_end = -rowsum((c0 W̄0) ⊙ φk) - …
    g[W0] = mat(in[AE]) * gw0;
    g[W1] = mat(in[AE]) * gw1;
    g[AE] = scal(gw0, in[W0]) + scal(gw1, in[W1]);
    const auto ce = col(in[CE]);
    auto Z0 = chunk_matmul(f.c0, gw0), RW1 = chunk_matmul(f.G0, tr(gw1));  // [N, f], [N, d]
    Tensor gkf = -ce * Z0, gc1 = -ce * RW1;
    g[CE] = -(rowsum(Z0, kf) + rowsum(f.c1, RW1));
    Tensor gc0, gG0;  // the [N, hid] ones: one product each ([c_end | e_end] stacked along the inner dim)
    if (mom) {
      const auto ee = col(in[EE]);
      g[S0] = mat(in[DE]) * gw0 + mat(in[PE]) * gs0;
      g[S1] = mat(in[DE]) * gw1 + mat(in[PE]) * gs1;
      g[DE] = scal(gw0, in[S0]) + scal(gw1, in[S1]);
      g[PE] = scal(gs0, in[S0]) + scal(gs1, in[S1]);
      auto Zs0 = chunk_matmul(f.c0, gs0), RS1 = chunk_matmul(f.G0, tr(gs1));
      gkf.sub_(ee * Zs0);
      gc1.sub_(ee * RS1);
      g[EE] = -(rowsum(Zs0, kf) + rowsum(f.c1, RS1));
      gc0 = chunk_matmul(torch::cat({ce * kf, ee * kf}, -1), tr(torch::cat({gw0, gs0}, -1))).neg_();
      gG0 = chunk_matmul(torch::cat({ce * f.c1, ee * f.c1}, -1), torch::cat({gw1, gs1}, -2)).neg_();
    } else {
      gc0 = chunk_matmul(ce * kf, tr(gw0)).neg_();
      gG0 = chunk_matmul(ce * f.c1, gw1).neg_();
    }

    // Read-out, layer 1 (its outputs narrower: X1, M1 kept) then layer 0 (φq narrower).
    Tensor gA = torch::zeros_like(in[CA]), gD = mom ? torch::zeros_like(in[CD]) : Tensor(),
           gC = torch::zeros_like(in[CC]);
    const auto &A = in[CA], &D = in[CD], &C = in[CC];
    const Tensor S0_ = mom ? in[S0] : Tensor(), S1_ = mom ? in[S1] : Tensor();
    auto l1 = readout_layer_backward(gy, f.Ga, in[W1], S1_, f.G0, f.c1, f.X1, f.M1, f.GG, A, D, C, gA, gD, gC);
    auto l0 = readout_layer_backward(l1.x.mul_(f.Pa), qf, in[W0], S0_, kf, f.c0, Tensor(), Tensor(), f.QK, A, D, C,
                                     gA, gD, gC);
    g[W0] += l0.W;
    g[W1] += l1.W;
    if (mom) g[S0] += l0.S, g[S1] += l1.S;
    g[Q] = gy;
    g[QF] = l0.x;
    gkf += l0.r;
    gG0 += l1.r;
    gc0 += l0.c;
    gc1 += l1.c;
    g[CA] = gA, g[CD] = gD, g[CC] = gC;

    // Clip: c0 = f Δ, c1 = f g_y (in place: gc0 becomes Δ̄, gc1 ḡ_y).
    if (tau > 0) clip_backward(gc0, gc1, f.Dl, f.E, kf, f.G0, f.clip, tau, gkf, gG0);
    Tensor &gDl = gc0, &gE = gc1;

    // Anchor pass, in reverse: Δ = R ⊙ GELU'(H0), R = g_y Â1, H0 = φk Â0ᵀ.
    auto gR = gDl * f.P0;
    gE += chunk_matmul(gR, tr(in[A1]));
    g[A1] = chunk_matmul(tr(f.E), gR);
    g[V] = -gE;
    if (l2) {  // g_y = K + G0 Â1ᵀ - V
      g[K] = gE;
      gG0 += chunk_matmul(gE, in[A1]);
      g[A1] += chunk_matmul(tr(gE), f.G0);
    }
    auto gH0 = gG0.mul_(f.P0).addcmul_(gDl, f.RP0d);  // Ḡ0 ⊙ GELU' + Δ̄ ⊙ R ⊙ GELU''
    gkf += chunk_matmul(gH0, in[A0]);
    g[A0] = chunk_matmul(tr(gH0), kf);
    g[KF] = gkf;
    return g;
  }
};

}  // namespace

bool fused_chunk_supported(const DeepMemorySpec& spec) { return spec.kind == MemoryKind::ResidualMLP; }

FusedChunkOutput fused_mlp_chunk(const FusedChunkInputs& x, bool loss_l2, double inner_grad_clip) {
  if (x.w.size() != 2 || x.anchor.size() != 2 || (!x.s.empty() && x.s.size() != 2))
    throw Error("fused deep-memory chunk: the residual MLP has 2 weight matrices");
  const bool mom = !x.s.empty();
  // Without momentum its inputs are empty placeholders (LibTorch 1.13's custom Function cannot take undefined ones).
  const auto none = torch::empty({0}, x.q.options());
  auto opt = [&](const torch::Tensor& t) { return mom ? t : none; };
  variable_list in = {x.q,      x.qf.defined() ? x.qf : x.q,
                      x.k,      x.kf.defined() ? x.kf : x.k,
                      x.v,      x.w[0],
                      x.w[1],   mom ? x.s[0] : none,
                      mom ? x.s[1] : none, x.anchor[0],
                      x.anchor[1], x.A,
                      opt(x.D), x.C,
                      x.a_end,  opt(x.d_end),
                      x.c_end,  opt(x.p_end),
                      opt(x.e_end)};
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = FusedChunkFn::apply(at::TensorList(in), mom, loss_l2, inner_grad_clip);
  } else {
    const Form form = form_for(in, mom);
    auto o = forward_any(in, mom, loss_l2, inner_grad_clip, form, bf16_products_for(in, form));
    out = {o.y, o.w0, o.w1, o.s0, o.s1};
  }
  FusedChunkOutput r;
  r.y = out[0];
  r.w = {out[1], out[2]};
  if (mom) r.s = {out[3], out[4]};
  return r;
}

}  // namespace mnemo
