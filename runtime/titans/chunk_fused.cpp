// One chunk of the Titans LMM dual form (residual-MLP memory M(z) = z + W_1 GELU(W_2 z), momentum and decay,
// optional inner-gradient clip) as a single autograd node with a hand-written backward. The op-by-op form
// (titans_lmm_chunk_composed) records ~80 small ops per chunk and ~2x as many backward nodes; at the tiny shapes
// their dispatch overhead, not the arithmetic, dominated training (issue 19). Same maths as kernel.cpp:
//   anchor pass   H0 = K Â0ᵀ, G0 = GELU(H0), E = K + G0 Â1ᵀ - V, Δ = (E Â1) ⊙ GELU'(H0)
//   clip (τ > 0)  s = |Δ|²|K|² + |E|²|G0|²,  f = τ / sqrt(max(τ², s)),  cols c0 = f Δ, c1 = f E; rows r0 = K, r1 = G0
//   coefficients  E1[i,m] = Π_{m<r≤i}(1-α_r), E2[m,j] = θ_j Π_{j<r≤m} η_r, C = E1 E2, D = E1 P, A = Π(1-α)  (§5.3)
//   read-out      H = A⊙(Q W0ᵀ) + D⊙(Q S0ᵀ) - (C ⊙ Q r0ᵀ) c0,  U = A⊙(G W1ᵀ) + D⊙(G S1ᵀ) - (C ⊙ G r1ᵀ) c1,
//                 G = GELU(H),  Y = Q + U
//   chunk end     W_l' = A_n W_l + D_n S_l - c_lᵀ diag(C[n]) r_l,   S_l' = P_n S_l - c_lᵀ diag(E2[n]) r_l
// Rows are tokens: Q, K, V, E [n, d]; H0, G0, Δ, H, G [n, hid]; W0, S0, Â0 [hid, d]; W1, S1, Â1 [d, hid].
// The backward is the adjoint of each line in reverse; tests/test_titans_fused.cpp checks it against autograd
// through the composed form in fp64 (outputs, end state, every input's gradient).
#include <cmath>
#include <limits>

#include "runtime/kernels/gelu.h"
#include "runtime/titans/titans.h"

namespace mnemo {

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor tr(const Tensor& x) { return x.transpose(-1, -2); }
Tensor col(const Tensor& x) { return x.unsqueeze(-1); }  // [.., n] -> [.., n, 1]
Tensor rowsum(const Tensor& a, const Tensor& b) { return (a * b).sum(-1); }

// exp(L_i - L_j) for j <= i, 0 above the diagonal.
Tensor masked_exp(const Tensor& L) {
  const int64_t n = L.size(-1);
  auto upper = torch::ones({n, n}, L.options().dtype(torch::kBool)).triu(1);
  return (col(L) - L.unsqueeze(-2)).masked_fill(upper, -std::numeric_limits<double>::infinity()).exp();
}

// Inputs, in apply() order.
enum In { Q, K, V, LK, LE, TH, W0, W1, S0, S1, A0, A1, kInputs };

struct Forward {
  Tensor y, w0, w1, s0, s1;                       // outputs
  Tensor P0, P0d, G0, E, R, Dl, f, s, kk, dd, ee, gg;  // anchor pass (P0 = GELU'(H0), P0d = GELU''(H0))
  Tensor c0, c1, E1, F2, E2, p, A, D, C;          // terms and coefficients
  Tensor X0, M0, QK, X1, M1, GG, Ga, Pa;          // read-out
};

Forward run_forward(const variable_list& in, double tau) {
  Forward o;
  const auto &q = in[Q], &k = in[K], &v = in[V];
  const int64_t n = q.size(-2);
  // Anchor pass: inner gradients at Â as rank-1 terms.
  auto H0 = torch::matmul(k, tr(in[A0]));
  {
    const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
    auto cdf = torch::erf(H0 * inv_sqrt2).add_(1.0).mul_(0.5);
    auto pdf = (H0 * H0).mul_(-0.5).exp_().mul_(inv_sqrt_2pi);
    o.G0 = H0 * cdf;
    o.P0 = torch::addcmul(cdf, H0, pdf);
    o.P0d = pdf * (2.0 - H0 * H0);  // GELU''
  }
  o.E = k + torch::matmul(o.G0, tr(in[A1])) - v;
  o.R = torch::matmul(o.E, in[A1]);
  o.Dl = o.R * o.P0;
  if (tau > 0) {
    o.kk = k.pow(2).sum(-1), o.dd = o.Dl.pow(2).sum(-1), o.ee = o.E.pow(2).sum(-1), o.gg = o.G0.pow(2).sum(-1);
    o.s = o.dd * o.kk + o.ee * o.gg;
    o.f = tau * torch::rsqrt(torch::clamp_min(o.s, tau * tau));
    o.c0 = o.Dl * col(o.f);
    o.c1 = o.E * col(o.f);
  } else {
    o.c0 = o.Dl, o.c1 = o.E;
  }
  // Momentum/decay coefficients of the chunk.
  auto La = in[LK].cumsum(-1), Le = in[LE].cumsum(-1);
  o.E1 = masked_exp(La);
  o.A = La.exp();
  o.F2 = masked_exp(Le);
  o.E2 = o.F2 * in[TH].unsqueeze(-2);
  o.p = Le.exp();
  o.C = torch::matmul(o.E1, o.E2);
  o.D = torch::matmul(o.E1, col(o.p)).squeeze(-1);
  // Read-out through the per-token weights, layer 0 then layer 1.
  o.X0 = torch::matmul(q, tr(in[W0]));
  o.M0 = torch::matmul(q, tr(in[S0]));
  o.QK = torch::matmul(q, tr(k));
  auto H = col(o.A) * o.X0 + col(o.D) * o.M0 - torch::matmul(o.C * o.QK, o.c0);
  {
    auto g = gelu_and_grad(H);  // grad mode is off here: plain values
    o.Ga = g.value, o.Pa = g.grad;
  }
  o.X1 = torch::matmul(o.Ga, tr(in[W1]));
  o.M1 = torch::matmul(o.Ga, tr(in[S1]));
  o.GG = torch::matmul(o.Ga, tr(o.G0));
  o.y = q + col(o.A) * o.X1 + col(o.D) * o.M1 - torch::matmul(o.C * o.GG, o.c1);
  // Chunk-end weights and momentum.
  auto last = [&](const Tensor& x) { return x.select(-1, n - 1).unsqueeze(-1).unsqueeze(-1); };  // [B, H, 1, 1]
  auto cl = col(o.C.select(-2, n - 1)), el = col(o.E2.select(-2, n - 1));                       // [B, H, n, 1]
  o.w0 = last(o.A) * in[W0] + last(o.D) * in[S0] - torch::matmul(tr(o.c0 * cl), k);
  o.w1 = last(o.A) * in[W1] + last(o.D) * in[S1] - torch::matmul(tr(o.c1 * cl), o.G0);
  o.s0 = last(o.p) * in[S0] - torch::matmul(tr(o.c0 * el), k);
  o.s1 = last(o.p) * in[S1] - torch::matmul(tr(o.c1 * el), o.G0);
  return o;
}

// Adjoint of out = A⊙(x Wᵀ) + D⊙(x Sᵀ) - (C ⊙ x rᵀ) c for one layer of the read-out, accumulating into the
// gradients of A, D (vectors), C, x, W, S, r, c. X = x Wᵀ, M = x Sᵀ, XR = x rᵀ as in the forward.
struct LayerGrads {
  Tensor x, W, S, r, c;
};
LayerGrads readout_layer_backward(const Tensor& go, const Tensor& x, const Tensor& W, const Tensor& S,
                                  const Tensor& r, const Tensor& c, const Tensor& X, const Tensor& M,
                                  const Tensor& XR, const Forward& f, Tensor& gA, Tensor& gD, Tensor& gC) {
  LayerGrads g;
  gA = gA + rowsum(go, X);
  gD = gD + rowsum(go, M);
  auto oA = col(f.A) * go, oD = col(f.D) * go;
  g.x = torch::matmul(oA, W) + torch::matmul(oD, S);
  g.W = torch::matmul(tr(oA), x);
  g.S = torch::matmul(tr(oD), x);
  auto gSc = -torch::matmul(go, tr(c));  // ∂/∂(C ⊙ x rᵀ)
  gC = gC + gSc * XR;
  auto gXR = gSc * f.C;
  g.c = -torch::matmul(tr(f.C * XR), go);
  g.x = g.x + torch::matmul(gXR, r);
  g.r = torch::matmul(tr(gXR), x);
  return g;
}

// Reverse cumulative sum along the last axis: x̄_i = Σ_{t ≥ i} ȳ_t (adjoint of cumsum).
Tensor reverse_cumsum(const Tensor& g) { return g.flip(-1).cumsum(-1).flip(-1); }

struct TitansChunkFn : torch::autograd::Function<TitansChunkFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& lk, const Tensor& le, const Tensor& th, const Tensor& w0,
                               const Tensor& w1, const Tensor& s0, const Tensor& s1, const Tensor& a0,
                               const Tensor& a1, double tau) {
    const variable_list in = {q, k, v, lk, le, th, w0, w1, s0, s1, a0, a1};
    auto o = run_forward(in, tau);
    ctx->saved_data["tau"] = tau;
    ctx->save_for_backward({in[Q], in[K], in[W0], in[W1], in[S0], in[S1], in[A0], in[A1], o.P0, o.P0d, o.G0, o.E,
                            o.R, o.Dl, o.f, o.s, o.kk, o.dd, o.ee, o.gg, o.c0, o.c1, o.E1, o.F2, o.E2, o.p, o.A,
                            o.D, o.C, o.X0, o.M0, o.QK, o.X1, o.M1, o.GG, o.Ga, o.Pa});
    return {o.y, o.w0, o.w1, o.s0, o.s1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const double tau = ctx->saved_data["tau"].toDouble();
    const auto sv = ctx->get_saved_variables();
    size_t i = 0;
    const Tensor q = sv[i++], k = sv[i++], W0_ = sv[i++], W1_ = sv[i++], S0_ = sv[i++], S1_ = sv[i++],
                 A0_ = sv[i++], A1_ = sv[i++];
    Forward f;
    for (Tensor* t : {&f.P0, &f.P0d, &f.G0, &f.E, &f.R, &f.Dl, &f.f, &f.s, &f.kk, &f.dd, &f.ee, &f.gg, &f.c0, &f.c1,
                      &f.E1, &f.F2, &f.E2, &f.p, &f.A, &f.D, &f.C, &f.X0, &f.M0, &f.QK, &f.X1, &f.M1, &f.GG, &f.Ga,
                      &f.Pa})
      *t = sv[i++];
    const Tensor &gy = go[0], &gw0 = go[1], &gw1 = go[2], &gs0 = go[3], &gs1 = go[4];
    const int64_t n = q.size(-2);
    auto scal = [](const Tensor& a, const Tensor& b) { return (a * b).sum({-2, -1}); };  // ⟨a, b⟩ [B, H]
    auto last = [&](const Tensor& x) { return x.select(-1, n - 1).unsqueeze(-1).unsqueeze(-1); };

    // Chunk end: W_l' = A_n W_l + D_n S_l - c_lᵀ diag(C[n]) r_l,  S_l' = P_n S_l - c_lᵀ diag(E2[n]) r_l.
    Tensor gW0 = last(f.A) * gw0, gW1 = last(f.A) * gw1;
    Tensor gS0 = last(f.D) * gw0 + last(f.p) * gs0, gS1 = last(f.D) * gw1 + last(f.p) * gs1;
    auto gA_last = scal(gw0, W0_) + scal(gw1, W1_), gD_last = scal(gw0, S0_) + scal(gw1, S1_);
    auto gp_last = scal(gs0, S0_) + scal(gs1, S1_);
    auto cl = f.C.select(-2, n - 1), el = f.E2.select(-2, n - 1);  // [B, H, n]
    Tensor gc0, gc1, gr0, gr1, gcl, gel;
    {
      auto RW0 = torch::matmul(k, tr(gw0)), RS0 = torch::matmul(k, tr(gs0));  // r0 Z̄ᵀ  [n, hid]
      auto RW1 = torch::matmul(f.G0, tr(gw1)), RS1 = torch::matmul(f.G0, tr(gs1));  // [n, d]
      gc0 = -(col(cl) * RW0 + col(el) * RS0);
      gc1 = -(col(cl) * RW1 + col(el) * RS1);
      gr0 = -(col(cl) * torch::matmul(f.c0, gw0) + col(el) * torch::matmul(f.c0, gs0));
      gr1 = -(col(cl) * torch::matmul(f.c1, gw1) + col(el) * torch::matmul(f.c1, gs1));
      gcl = -(rowsum(f.c0, RW0) + rowsum(f.c1, RW1));
      gel = -(rowsum(f.c0, RS0) + rowsum(f.c1, RS1));
    }

    // Read-out, layer 1 then layer 0.
    Tensor gA = torch::zeros_like(f.A), gD = torch::zeros_like(f.D), gC = torch::zeros_like(f.C);
    auto l1 = readout_layer_backward(gy, f.Ga, W1_, S1_, f.G0, f.c1, f.X1, f.M1, f.GG, f, gA, gD, gC);
    auto gH = l1.x * f.Pa;
    auto l0 = readout_layer_backward(gH, q, W0_, S0_, k, f.c0, f.X0, f.M0, f.QK, f, gA, gD, gC);
    gW0 = gW0 + l0.W, gW1 = gW1 + l1.W, gS0 = gS0 + l0.S, gS1 = gS1 + l1.S;
    Tensor gq = gy + l0.x, gk = gr0 + l0.r, gG0 = gr1 + l1.r;
    gc0 = gc0 + l0.c, gc1 = gc1 + l1.c;

    // Coefficients (the chunk-end rows add to the last entries).
    auto at_last = [&](const Tensor& g, const Tensor& x) {  // g [B, H, n] + x [B, H] at n - 1
      return g + torch::nn::functional::pad(col(x), torch::nn::functional::PadFuncOptions({n - 1, 0}));
    };
    gA = at_last(gA, gA_last);
    gD = at_last(gD, gD_last);
    auto gp = at_last(torch::matmul(tr(f.E1), col(gD)).squeeze(-1), gp_last);  // D = E1 P
    gC = gC + torch::nn::functional::pad(gcl.unsqueeze(-2), torch::nn::functional::PadFuncOptions({0, 0, n - 1, 0}));
    auto gE2 = torch::matmul(tr(f.E1), gC) +
               torch::nn::functional::pad(gel.unsqueeze(-2), torch::nn::functional::PadFuncOptions({0, 0, n - 1, 0}));
    auto gE1 = torch::matmul(gC, tr(f.E2)) + col(gD) * f.p.unsqueeze(-2);
    auto ME1 = gE1 * f.E1;
    auto gLa = gA * f.A + ME1.sum(-1) - ME1.sum(-2);
    auto gth = (gE2 * f.F2).sum(-2);
    auto ME2 = gE2 * f.E2;
    auto gLe = gp * f.p + ME2.sum(-1) - ME2.sum(-2);

    // Clip: c0 = f Δ, c1 = f E.
    Tensor gDl = gc0, gE = gc1;
    if (tau > 0) {
      gDl = gc0 * col(f.f);
      gE = gc1 * col(f.f);
      auto gf = rowsum(gc0, f.Dl) + rowsum(gc1, f.E);
      // f = τ x^{-1/2}, x = max(s, τ²): ∂f/∂s = -½ τ s^{-3/2} where s ≥ τ² (clamp_min's rule), else 0.
      auto gs = torch::where(f.s >= tau * tau, gf * (-0.5 * tau) * f.s.pow(-1.5), torch::zeros_like(gf));
      gDl = gDl + col(2 * gs * f.kk) * f.Dl;
      gk = gk + col(2 * gs * f.dd) * k;
      gE = gE + col(2 * gs * f.gg) * f.E;
      gG0 = gG0 + col(2 * gs * f.ee) * f.G0;
    }

    // Anchor pass, in reverse.
    auto gR = gDl * f.P0, gP0 = gDl * f.R;
    gE = gE + torch::matmul(gR, tr(A1_));
    auto gA1 = torch::matmul(tr(f.E), gR);
    gk = gk + gE;
    auto gv = -gE;
    gG0 = gG0 + torch::matmul(gE, A1_);
    gA1 = gA1 + torch::matmul(tr(gE), f.G0);
    auto gH0 = gG0 * f.P0 + gP0 * f.P0d;
    gk = gk + torch::matmul(gH0, A0_);
    auto gA0 = torch::matmul(tr(gH0), k);

    variable_list out(kInputs + 1);  // + tau
    out[Q] = gq, out[K] = gk, out[V] = gv;
    out[LK] = reverse_cumsum(gLa), out[LE] = reverse_cumsum(gLe), out[TH] = gth;
    out[W0] = gW0, out[W1] = gW1, out[S0] = gS0, out[S1] = gS1, out[A0] = gA0, out[A1] = gA1;
    return out;
  }
};

}  // namespace

bool titans_fused_chunk_supported(const DeepMemorySpec& spec, const torch::Tensor& log_keep,
                                  const torch::Tensor& log_eta) {
  return spec.kind == MemoryKind::ResidualMLP && log_keep.defined() && log_eta.defined() && spec.d_feat == 0;
}

TitansChunkOutput titans_mlp_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                                         const torch::Tensor& theta, const MemoryWeights& w, const MemoryWeights& s,
                                         const MemoryWeights& anchor, double inner_grad_clip) {
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = TitansChunkFn::apply(q, k, v, log_keep, log_eta, theta, w[0], w[1], s[0], s[1], anchor[0], anchor[1],
                               inner_grad_clip);
  } else {
    auto o = run_forward({q, k, v, log_keep, log_eta, theta, w[0], w[1], s[0], s[1], anchor[0], anchor[1]},
                         inner_grad_clip);
    out = {o.y, o.w0, o.w1, o.s0, o.s1};
  }
  return {out[0], {out[1], out[2]}, {out[3], out[4]}};
}

}  // namespace mnemo
