// TTT kernel internals (see prepare.h, ttt.h; docs/models.md#ttt, docs/models.md#deep-memory): input checks and
// preparation, the anchor pass and the output function shared by the token-by-token form (naive.cpp) and the dual
// form (chunk.cpp).
//
// Anchor gradients (docs/models.md#deep-memory "MLP + LN", row storage): with X_1 = K, Z_l = X_l W_l + b_l,
// X_{l+1} = GELU(Z_l), u = Z_last, n = (u - mean u)/r, r = sqrt(var u + eps):
//   g   = w ⊙ (n ⊙ w + b_ln - target)                    (∂ℓ/∂(LN output), target = v - k)
//   E_L = (D g - Σ g - n Σ(g ⊙ n)) / (r D)                (LN backward: ∂ℓ/∂u)
//   E_l = (E_{l+1} W_{l+1}^T) ⊙ GELU'(Z_l)                 (∂ℓ/∂Z_l)
//   ∇W_l = Σ_s X_{l,s}^T E_{l,s},  ∇b_l = Σ_s E_{l,s}
#include <limits>

#include "core/common.h"
#include "runtime/kernels/gelu.h"
#include "runtime/ttt/prepare.h"

namespace mnemo {

torch::Tensor ttt_gelu_grad(const torch::Tensor& h) { return gelu_exact_grad(h); }
torch::Tensor ttt_gelu(const torch::Tensor& h) { return gelu_safe(h); }


namespace ttt_detail {

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& row,
                  const torch::Tensor& col, const torch::Tensor& ln_w, const torch::Tensor& ln_b,
                  const TTTState& st, const TTTOptions& opt) {
  if (!q.defined() || !k.defined() || !v.defined() || !row.defined() || !col.defined())
    throw Error("ttt: q, k, v, row and col are required");
  if (q.dim() != 4) throw Error("ttt: q must be [B, T, H, D], got " + shape_of(q));
  if (k.sizes() != q.sizes() || v.sizes() != q.sizes())
    throw Error("ttt: k and v must have q's shape " + shape_of(q) + " (D = K = V), got " + shape_of(k) + " and " +
                shape_of(v));
  const std::vector<int64_t> bth = {q.size(0), q.size(1), q.size(2)};
  if (row.sizes() != torch::IntArrayRef(bth) || col.sizes() != torch::IntArrayRef(bth))
    throw Error("ttt: row and col coefficients must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) + ", got " +
                shape_of(row) + " and " + shape_of(col));
  if (opt.mini_batch < 1) throw Error("ttt: mini_batch must be >= 1, got " + std::to_string(opt.mini_batch));
  if (opt.output_residual != "query" && opt.output_residual != "inner" && opt.output_residual != "none")
    throw Error("ttt: output_residual must be \"query\", \"inner\" or \"none\", got \"" + opt.output_residual + "\"");
  if (opt.inner_ln) {
    const std::vector<int64_t> hd = {q.size(2), q.size(3)};
    if (!ln_w.defined() || !ln_b.defined() || ln_w.sizes() != torch::IntArrayRef(hd) ||
        ln_b.sizes() != torch::IntArrayRef(hd))
      throw Error("ttt: ln_w and ln_b must be [H, D] = " + c10::str(torch::IntArrayRef(hd)));
  }
  if (!st.defined()) throw Error("ttt: an initial state (anchor weights) is required");
  const auto& W = st.anchor.W;
  if (W.size() < 1) throw Error("ttt: the inner model needs at least one layer");
  if (!st.anchor.b.empty() && st.anchor.b.size() != W.size())
    throw Error("ttt: inner biases must be given for every layer or none");
  int64_t in = q.size(3);
  for (size_t l = 0; l < W.size(); ++l) {
    if (W[l].dim() != 4 || W[l].size(0) != q.size(0) || W[l].size(1) != q.size(2) || W[l].size(2) != in)
      throw Error("ttt: inner weight " + std::to_string(l) + " must be [B, H, " + std::to_string(in) +
                  ", out], got " + shape_of(W[l]));
    in = W[l].size(3);
  }
  if (in != q.size(3)) throw Error("ttt: the inner model must map D -> D, last layer gives " + std::to_string(in));
  if (st.pos < 0 || st.pos >= opt.mini_batch)
    throw Error("ttt: state position " + std::to_string(st.pos) + " outside the mini-batch [0, " +
                std::to_string(opt.mini_batch) + ")");
}

TTTWeights cast_weights(const TTTWeights& w, torch::ScalarType dt) {
  TTTWeights out;
  for (const auto& t : w.W) out.W.push_back(t.to(dt));
  for (const auto& t : w.b) out.b.push_back(t.to(dt));
  return out;
}

}  // namespace

TTTWeights zeros_like_weights(const TTTWeights& w) {
  TTTWeights out;
  for (const auto& t : w.W) out.W.push_back(torch::zeros_like(t));
  for (const auto& t : w.b) out.b.push_back(torch::zeros_like(t));
  return out;
}

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& row,
                 const torch::Tensor& col, const torch::Tensor& ln_w, const torch::Tensor& ln_b,
                 const TTTState& st, const TTTOptions& opt) {
  check_inputs(q, k, v, row, col, ln_w, ln_b, st, opt);
  auto dt = torch::kFloat32;
  for (const auto& t : {q, k, v, row, col, st.anchor.W[0]})
    if (t.scalar_type() == torch::kFloat64) dt = torch::kFloat64;
  Prepared p;
  p.dtype = dt;
  p.q = (q.to(dt) * opt.scale).transpose(1, 2);
  p.k = k.to(dt).transpose(1, 2);
  p.v = v.to(dt).transpose(1, 2);
  p.row = row.to(dt).transpose(1, 2);
  p.col = col.to(dt).transpose(1, 2);
  if (opt.inner_ln) {
    p.ln_w = ln_w.to(dt).unsqueeze(0).unsqueeze(2);
    p.ln_b = ln_b.to(dt).unsqueeze(0).unsqueeze(2);
  }
  p.state.anchor = cast_weights(st.anchor, dt);
  p.state.acc = st.acc.W.empty() ? zeros_like_weights(p.state.anchor) : cast_weights(st.acc, dt);
  p.state.pos = st.pos;
  return p;
}

// Forward of the key tokens through the anchor weights and the closed-form backward.
AnchorPass anchor_pass(const TTTWeights& w, const torch::Tensor& K, const torch::Tensor& V, const Prepared& p,
                       const TTTOptions& opt) {
  const size_t L = w.W.size();
  const bool bias = !w.b.empty();
  AnchorPass a;
  std::vector<torch::Tensor> Z;
  auto x = K;
  for (size_t l = 0; l < L; ++l) {
    a.X.push_back(x);
    auto z = torch::matmul(x, w.W[l]);
    if (bias) z = z + w.b[l];
    Z.push_back(z);
    if (l + 1 < L) x = ttt_gelu(z);
  }
  auto u = Z.back();
  auto target = opt.skip ? V - K : V;
  torch::Tensor gu;
  if (opt.inner_ln) {
    const double D = static_cast<double>(u.size(-1));
    auto mu = u.mean(-1, true);
    auto r = torch::sqrt((u - mu).pow(2).mean(-1, true) + opt.eps);
    auto n = (u - mu) / r;
    auto g = p.ln_w * (n * p.ln_w + p.ln_b - target);
    gu = (D * g - g.sum(-1, true) - n * (g * n).sum(-1, true)) / (r * D);
  } else {
    gu = u - target;
  }
  a.E.assign(L, torch::Tensor());
  a.E[L - 1] = gu;
  for (size_t l = L - 1; l-- > 0;)
    a.E[l] = torch::matmul(a.E[l + 1], w.W[l + 1].transpose(-1, -2)) * ttt_gelu_grad(Z[l]);
  return a;
}

torch::Tensor output_fn(const torch::Tensor& o_tilde, const torch::Tensor& q, const Prepared& p,
                        const TTTOptions& opt) {
  torch::Tensor y = o_tilde;
  if (opt.inner_ln) {
    auto mu = o_tilde.mean(-1, true);
    auto var = (o_tilde - mu).pow(2).mean(-1, true);
    y = (o_tilde - mu) / torch::sqrt(var + opt.eps) * p.ln_w + p.ln_b;
  }
  if (opt.output_residual == "query") return q + y;
  if (opt.output_residual == "inner") return o_tilde + y;
  return y;
}

TTTResult finish(TTTResult r, const torch::Tensor& v) {
  r.o = r.o.transpose(1, 2).contiguous().to(v.scalar_type());
  return r;
}

}  // namespace ttt_detail
}  // namespace mnemo
