// One TTT-MLP mini-batch of the dual form (chunk.cpp ttt_chunk; 2-layer GELU inner MLP with biases, inner LN
// loss) as a single autograd node with a hand-written backward. The composed form records ~180 small ops per
// mini-batch (16 tokens) and about twice as many backward nodes; their dispatch overhead dominated training
//. Rows are tokens; per head:
//   anchor    Z0 = K W0 + b0, X1 = GELU(Z0), u = X1 W1 + b1, n = (u - ū)/r, r = sqrt(var u + eps)
//             g = w ⊙ (w ⊙ n + b_ln - t)   (t = v - k, or v without the skip)
//             E1 = (g - mean g - n mean(g ⊙ n)) / r,   E0 = (E1 W1ᵀ) ⊙ GELU'(Z0)
//   read-out  C = tril(row colᵀ),  z0 = Q W0 + b0 - ((Q Kᵀ + 1) ⊙ C) E0,  x1 = GELU(z0),
//             z1 = x1 W1 + b1 - ((x1 X1ᵀ + 1) ⊙ C) E1,  o = r_t + LN(z1) ⊙ w + b_ln
//   carry     acc_W0 = Kᵀ (E0 ⊙ col), acc_W1 = X1ᵀ (E1 ⊙ col), acc_b_l = Σ_s E_l ⊙ col
// The backward is the adjoint of each line in reverse (the LN loss's second-order part included); tests compare it
// with autograd through the composed form in fp64 (tests/test_ttt.cpp).
#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/kernels/node_math.h"
#include "runtime/ttt/ttt.h"

namespace mnemo {

namespace {

using namespace node;  // Tensor, tr, head_sum, layer_norm_adjoint (runtime/kernels/node_math.h)

Tensor mean_(const Tensor& x) { return mean_last(x); }
Tensor rows_sum(const Tensor& x) { return x.sum(-2, true); }  // Σ over tokens, kept as a row

enum In { Q, K, V, ROW, COL, LNW, LNB, W0, W1, B0, B1, kInputs };
enum Residual { kQuery = 0, kInner = 1, kNone = 2 };

struct Forward {
  Tensor o, aW0, aW1, ab0, ab1;                        // outputs
  Tensor X1, P0, P0d, n, r, g, E1, Y0, E0, C, mask;    // anchor pass, coefficients
  Tensor att0, x1, Pz, att1, nz, rz;                   // read-out
};

Forward run_forward(const variable_list& in, bool skip, int residual, double eps) {
  Forward f;
  const auto &q = in[Q], &k = in[K], &v = in[V], &w = in[LNW], &bl = in[LNB];
  const int64_t c = q.size(-2);
  // Anchor pass and the closed-form inner gradients.
  {
    auto Z0 = chunk_matmul(k, in[W0]) + in[B0];
    auto z = gelu_values(Z0, /*with_second=*/true);
    f.X1 = z.value, f.P0 = z.grad, f.P0d = z.second;
  }
  auto u = chunk_matmul(f.X1, in[W1]) + in[B1];
  auto uc = u - mean_(u);
  f.r = torch::sqrt(mean_(uc * uc) + eps);
  f.n = uc / f.r;
  f.g = w * (f.n * w + bl - (skip ? v - k : v));
  f.E1 = (f.g - mean_(f.g) - f.n * mean_(f.g * f.n)) / f.r;
  f.Y0 = chunk_matmul(f.E1, tr(in[W1]));
  f.E0 = f.Y0 * f.P0;
  // C[t, s] = row_t col_s, s ≤ t.
  f.mask = torch::ones({c, c}, q.options()).tril();
  f.C = in[ROW].unsqueeze(-1) * in[COL].unsqueeze(-2) * f.mask;
  // Read-out through the per-token weights.
  f.att0 = chunk_matmul(q, tr(k)) + 1.0;
  {
    auto z = gelu_values(chunk_matmul(q, in[W0]) + in[B0] - chunk_matmul(f.att0 * f.C, f.E0));  // no GELU'' here
    f.x1 = z.value, f.Pz = z.grad;
  }
  f.att1 = chunk_matmul(f.x1, tr(f.X1)) + 1.0;
  auto z1 = chunk_matmul(f.x1, in[W1]) + in[B1] - chunk_matmul(f.att1 * f.C, f.E1);
  auto zc = z1 - mean_(z1);
  f.rz = torch::sqrt(mean_(zc * zc) + eps);
  f.nz = zc / f.rz;
  f.o = f.nz * w + bl;
  if (residual == kQuery) f.o = f.o + q;
  if (residual == kInner) f.o = f.o + z1;
  // Accumulators Σ_s col_s ∇ℓ_s(anchor).
  auto col = in[COL].unsqueeze(-1);
  auto F0 = f.E0 * col, F1 = f.E1 * col;
  f.aW0 = chunk_matmul(tr(k), F0);
  f.aW1 = chunk_matmul(tr(f.X1), F1);
  f.ab0 = rows_sum(F0);
  f.ab1 = rows_sum(F1);
  return f;
}


struct TTTChunkFn : torch::autograd::Function<TTTChunkFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, bool skip, int64_t residual,
                               double eps) {
    const variable_list in(inputs.begin(), inputs.end());
    auto f = run_forward(in, skip, static_cast<int>(residual), eps);
    ctx->saved_data["skip"] = skip;
    ctx->saved_data["residual"] = residual;
    variable_list save(in);
    for (const Tensor* t : {&f.X1, &f.P0, &f.P0d, &f.n, &f.r, &f.g, &f.E1, &f.Y0, &f.E0, &f.C, &f.mask, &f.att0,
                            &f.x1, &f.Pz, &f.att1, &f.nz, &f.rz})
      save.push_back(*t);
    ctx->save_for_backward(save);
    return {f.o, f.aW0, f.aW1, f.ab0, f.ab1};
  }

  static variable_list backward(AutogradContext* ctx, variable_list go) {
    const bool skip = ctx->saved_data["skip"].toBool();
    const int residual = static_cast<int>(ctx->saved_data["residual"].toInt());
    const auto sv = ctx->get_saved_variables();
    const variable_list in(sv.begin(), sv.begin() + kInputs);
    Forward f;
    size_t i = kInputs;
    for (Tensor* t : {&f.X1, &f.P0, &f.P0d, &f.n, &f.r, &f.g, &f.E1, &f.Y0, &f.E0, &f.C, &f.mask, &f.att0, &f.x1,
                      &f.Pz, &f.att1, &f.nz, &f.rz})
      *t = sv[i++];
    const auto &q = in[Q], &k = in[K], &w = in[LNW], &W0_ = in[W0], &W1_ = in[W1];
    auto grad = [&](size_t j, const Tensor& like) { return go[j].defined() ? go[j] : torch::zeros_like(like); };
    const Tensor go_o = grad(0, q), gaW0 = grad(1, W0_), gaW1 = grad(2, W1_), gab0 = grad(3, in[B0]),
                 gab1 = grad(4, in[B1]);
    variable_list g(kInputs + 3);  // + skip, residual, eps

    // Accumulators: F_l = E_l ⊙ col, acc_W0 = Kᵀ F0, acc_W1 = X1ᵀ F1, acc_b_l = Σ F_l.
    auto col = in[COL].unsqueeze(-1);
    auto gF0 = chunk_matmul(k, gaW0) + gab0, gF1 = chunk_matmul(f.X1, gaW1) + gab1;
    Tensor gk = chunk_matmul(f.E0 * col, tr(gaW0));
    Tensor gX1 = chunk_matmul(f.E1 * col, tr(gaW1));
    Tensor gE0 = gF0 * col, gE1 = gF1 * col;
    Tensor gcol = (gF0 * f.E0).sum(-1) + (gF1 * f.E1).sum(-1);

    // Output: o = [q | z1] + nz ⊙ w + b_ln.
    g[LNW] = head_sum(go_o * f.nz);
    g[LNB] = head_sum(go_o);
    Tensor gq = residual == kQuery ? go_o : torch::zeros_like(q);
    Tensor gz1 = layer_norm_adjoint(go_o * w, f.nz, f.rz);
    if (residual == kInner) gz1 = gz1 + go_o;
    // Layer 1: z1 = x1 W1 + b1 - (att1 ⊙ C) E1.
    Tensor gx1 = chunk_matmul(gz1, tr(W1_));
    Tensor gW1 = chunk_matmul(tr(f.x1), gz1);
    Tensor gb1 = rows_sum(gz1);
    auto gS1 = -chunk_matmul(gz1, tr(f.E1));
    Tensor gC = gS1 * f.att1;
    auto gatt1 = gS1 * f.C;
    gE1 = gE1 - chunk_matmul(tr(f.att1 * f.C), gz1);
    gx1 = gx1 + chunk_matmul(gatt1, f.X1);
    gX1 = gX1 + chunk_matmul(tr(gatt1), f.x1);
    // Layer 0: z0 = q W0 + b0 - (att0 ⊙ C) E0.
    auto gz0 = gx1 * f.Pz;
    gq = gq + chunk_matmul(gz0, tr(W0_));
    Tensor gW0 = chunk_matmul(tr(q), gz0);
    Tensor gb0 = rows_sum(gz0);
    auto gS0 = -chunk_matmul(gz0, tr(f.E0));
    gC = gC + gS0 * f.att0;
    auto gatt0 = gS0 * f.C;
    gE0 = gE0 - chunk_matmul(tr(f.att0 * f.C), gz0);
    gq = gq + chunk_matmul(gatt0, k);
    gk = gk + chunk_matmul(tr(gatt0), q);
    // C = mask ⊙ row colᵀ.
    auto gCm = gC * f.mask;
    g[ROW] = chunk_matmul(gCm, in[COL].unsqueeze(-1)).squeeze(-1);
    gcol = gcol + chunk_matmul(tr(gCm), in[ROW].unsqueeze(-1)).squeeze(-1);
    g[COL] = gcol;

    // Anchor pass in reverse. E0 = (E1 W1ᵀ) ⊙ P0.
    auto gY0 = gE0 * f.P0;
    auto gP0 = gE0 * f.Y0;
    gE1 = gE1 + chunk_matmul(gY0, W1_);
    gW1 = gW1 + chunk_matmul(tr(gY0), f.E1);
    // E1 = (g - mean g - n mean(g ⊙ n)) / r.
    auto a = gE1 / f.r;
    auto gg = a - mean_(a) - f.n * mean_(a * f.n);
    Tensor gn = -(a * mean_(f.g * f.n) + f.g * mean_(a * f.n));
    auto gr = -(gE1 * f.E1).sum(-1, true) / f.r;
    // g = w ⊙ (w ⊙ n + b_ln - t).
    auto t_minus = in[LNB] - (skip ? in[V] - k : in[V]);  // b_ln - t
    gn = gn + gg * w * w;
    g[LNW] = g[LNW] + head_sum(gg * (2.0 * w * f.n + t_minus));
    g[LNB] = g[LNB] + head_sum(gg * w);
    auto gt = -(gg * w);
    g[V] = gt;
    if (skip) gk = gk - gt;
    // n = (u - ū)/r, r = sqrt(var u + eps): ∂r/∂u = n / D.
    auto gu = layer_norm_adjoint(gn, f.n, f.r) + gr * f.n / static_cast<double>(f.n.size(-1));
    // u = X1 W1 + b1, X1 = GELU(Z0), Z0 = K W0 + b0.
    gX1 = gX1 + chunk_matmul(gu, tr(W1_));
    gW1 = gW1 + chunk_matmul(tr(f.X1), gu);
    gb1 = gb1 + rows_sum(gu);
    auto gZ0 = gX1 * f.P0 + gP0 * f.P0d;
    gk = gk + chunk_matmul(gZ0, tr(W0_));
    gW0 = gW0 + chunk_matmul(tr(k), gZ0);
    gb0 = gb0 + rows_sum(gZ0);

    g[Q] = gq, g[K] = gk;
    g[W0] = gW0, g[W1] = gW1, g[B0] = gb0, g[B1] = gb1;
    return g;
  }
};

}  // namespace

bool ttt_fused_chunk_supported(const TTTWeights& anchor, const TTTOptions& opt) {
  return anchor.W.size() == 2 && anchor.b.size() == 2 && opt.inner_ln;
}

TTTFusedChunk ttt_mlp_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                                  const torch::Tensor& ln_b, const TTTWeights& anchor, const TTTOptions& opt) {
  const int64_t residual = opt.output_residual == "query" ? kQuery : opt.output_residual == "inner" ? kInner : kNone;
  variable_list in = {q, k, v, row, col, ln_w, ln_b, anchor.W[0], anchor.W[1], anchor.b[0], anchor.b[1]};
  variable_list out;
  if (torch::GradMode::is_enabled()) {
    out = TTTChunkFn::apply(at::TensorList(in), opt.skip, residual, opt.eps);
  } else {
    auto f = run_forward(in, opt.skip, static_cast<int>(residual), opt.eps);
    out = {f.o, f.aW0, f.aW1, f.ab0, f.ab1};
  }
  TTTFusedChunk r;
  r.o = out[0];
  r.acc.W = {out[1], out[2]};
  r.acc.b = {out[3], out[4]};
  return r;
}

}  // namespace mnemo
