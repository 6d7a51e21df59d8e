// TTT kernels: dual (chunked) form and token-by-token reference (see ttt.h; docs/models.md#ttt, docs/models.md#deep-memory).
//
// Anchor gradients (docs/models.md#deep-memory "MLP + LN", row storage): with X_1 = K, Z_l = X_l W_l + b_l,
// X_{l+1} = GELU(Z_l), u = Z_last, n = (u - mean u)/r, r = sqrt(var u + eps):
//   g   = w ⊙ (n ⊙ w + b_ln - target)                    (∂ℓ/∂(LN output), target = v - k)
//   E_L = (D g - Σ g - n Σ(g ⊙ n)) / (r D)                (LN backward: ∂ℓ/∂u)
//   E_l = (E_{l+1} W_{l+1}^T) ⊙ GELU'(Z_l)                 (∂ℓ/∂Z_l)
//   ∇W_l = Σ_s X_{l,s}^T E_{l,s},  ∇b_l = Σ_s E_{l,s}
// Dual read for a query x (layer input at the query side, x_1 = q̃):
//   Z_l(x_t) = x_t W_l + b_l - Σ_{s ≤ t} C[t,s] (x_t · X_{l,s} + 1) E_{l,s}
// i.e. one masked b×b matmul per layer (the "+1" is the inner bias seen as a constant input).
#include <limits>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/ttt/ttt.h"

namespace mnemo {

torch::Tensor ttt_gelu_grad(const torch::Tensor& h) { return gelu_exact_grad(h); }
torch::Tensor ttt_gelu(const torch::Tensor& h) { return gelu_safe(h); }

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }

struct Prepared {
  torch::Tensor q, k, v, row, col;  // [B, H, T, D] / [B, H, T]
  torch::Tensor ln_w, ln_b;         // [1, H, 1, D] (undefined without inner LN)
  TTTState state;                   // cast, acc filled with zeros when absent
  torch::ScalarType dtype;
};

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

struct AnchorPass {
  std::vector<torch::Tensor> X, E;  // per layer: inputs [B, H, c, in], errors ∂ℓ/∂Z_l [B, H, c, out]
};

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

// Token-by-token from the prepared tensors, tokens [from, from + n).
TTTResult recurrent_impl(const Prepared& p, TTTState st, int64_t from, int64_t n, const TTTOptions& opt) {
  const bool bias = !st.anchor.b.empty();
  const size_t L = st.anchor.W.size();
  std::vector<torch::Tensor> outs;
  TTTWeights cur;  // weights at the current token
  for (int64_t t = from; t < from + n; ++t) {
    auto k_t = p.k.narrow(2, t, 1), v_t = p.v.narrow(2, t, 1), q_t = p.q.narrow(2, t, 1);  // [B, H, 1, D]
    auto r_t = p.row.narrow(2, t, 1).unsqueeze(-1), c_t = p.col.narrow(2, t, 1).unsqueeze(-1);  // [B, H, 1, 1]
    auto a = anchor_pass(st.anchor, k_t, v_t, p, opt);
    cur = TTTWeights();
    for (size_t l = 0; l < L; ++l) {
      // ∇W_l = X_l^T E_l (a rank-1 matrix), ∇b_l = E_l.
      st.acc.W[l] = st.acc.W[l] + c_t * torch::matmul(a.X[l].transpose(-1, -2), a.E[l]);
      cur.W.push_back(st.anchor.W[l] - r_t * st.acc.W[l]);
      if (bias) {
        st.acc.b[l] = st.acc.b[l] + c_t * a.E[l];
        cur.b.push_back(st.anchor.b[l] - r_t * st.acc.b[l]);
      }
    }
    auto x = q_t;
    torch::Tensor z;
    for (size_t l = 0; l < L; ++l) {
      z = torch::matmul(x, cur.W[l]);
      if (bias) z = z + cur.b[l];
      if (l + 1 < L) x = ttt_gelu(z);
    }
    outs.push_back(output_fn(z, q_t, p, opt));
    if (++st.pos == opt.mini_batch) {
      st.anchor = cur;
      st.acc = zeros_like_weights(cur);
      st.pos = 0;
    }
  }
  TTTResult r;
  r.o = n > 0 ? torch::cat(outs, 2) : p.q.narrow(2, from, 0);
  if (n > 0) {
    r.final = cur;
  } else {
    r.final = st.anchor;  // no token read: the materialised weights are unknown only mid-batch
  }
  r.carry = st;
  return r;
}

TTTResult finish(TTTResult r, const torch::Tensor& v) {
  r.o = r.o.transpose(1, 2).contiguous().to(v.scalar_type());
  return r;
}

}  // namespace

TTTResult ttt_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                        const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  auto p = prepare(q, k, v, row, col, ln_w, ln_b, state, opt);
  return finish(recurrent_impl(p, p.state, 0, q.size(1), opt), v);
}

namespace {

TTTResult chunk_impl(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                     const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt, bool allow_fused) {
  auto p = prepare(q, k, v, row, col, ln_w, ln_b, state, opt);
  const bool fused = allow_fused && ttt_fused_chunk_supported(p.state.anchor, opt);
  const int64_t T = q.size(1), b = opt.mini_batch;
  std::vector<torch::Tensor> outs;
  TTTState st = p.state;
  TTTWeights last;
  int64_t t0 = 0;
  if (st.pos > 0) {  // finish the current mini-batch token by token (its accumulator is not zero)
    const int64_t n = std::min(T, b - st.pos);
    auto r = recurrent_impl(p, st, 0, n, opt);
    outs.push_back(r.o);
    st = r.carry;
    last = r.final;
    t0 = n;
  }
  const bool bias = !st.anchor.b.empty();
  const size_t L = st.anchor.W.size();
  // The mini-batches from t0 on (chunking.h split_pieces: one split node, not a narrow per mini-batch).
  const auto sizes = chunk_piece_sizes(T - t0, b, 0);
  auto pieces = [&](const torch::Tensor& x) { return split_pieces(x.narrow(2, t0, T - t0), sizes, 2); };
  const auto Ks = pieces(p.k), Vs = pieces(p.v), Qs = pieces(p.q), rows = pieces(p.row), cols = pieces(p.col);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t c = sizes[i];
    const auto &Kc = Ks[i], &Vc = Vs[i], &Qc = Qs[i];
    const auto &rowc = rows[i], &colc = cols[i];  // [B, H, c]
    auto row_last = rowc.narrow(2, c - 1, 1).unsqueeze(-1);  // [B, H, 1, 1]
    TTTWeights acc, end;
    if (fused) {
      auto r = ttt_mlp_chunk_fused(Qc, Kc, Vc, rowc, colc, p.ln_w, p.ln_b, st.anchor, opt);
      outs.push_back(r.o);
      acc = r.acc;
    } else {
      auto mask = torch::ones({c, c}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).tril();
      auto C = (rowc.unsqueeze(-1) * colc.unsqueeze(-2)).masked_fill(mask.logical_not(), 0.0);  // [B, H, c, c]
      auto a = anchor_pass(st.anchor, Kc, Vc, p, opt);
      auto x = Qc;
      torch::Tensor z;
      for (size_t l = 0; l < L; ++l) {
        auto att = torch::matmul(x, a.X[l].transpose(-1, -2));
        if (bias) att = att + 1.0;
        z = torch::matmul(x, st.anchor.W[l]) - torch::matmul(att * C, a.E[l]);
        if (bias) z = z + st.anchor.b[l];
        if (l + 1 < L) x = ttt_gelu(z);
      }
      outs.push_back(output_fn(z, Qc, p, opt));
      // Accumulator Σ col_s ∇ℓ_s.
      auto colE = colc.unsqueeze(-1);
      for (size_t l = 0; l < L; ++l) {
        auto wE = a.E[l] * colE;
        acc.W.push_back(torch::matmul(a.X[l].transpose(-1, -2), wE));
        if (bias) acc.b.push_back(wE.sum(2, true));
      }
    }
    // The weights at the chunk's last token.
    for (size_t l = 0; l < L; ++l) {
      end.W.push_back(st.anchor.W[l] - row_last * acc.W[l]);
      if (bias) end.b.push_back(st.anchor.b[l] - row_last * acc.b[l]);
    }
    last = end;
    if (c == b) {
      st.anchor = end;
      st.acc = zeros_like_weights(end);
      st.pos = 0;
    } else {
      st.acc = acc;
      st.pos = c;
    }
  }
  TTTResult r;
  r.o = outs.empty() ? p.q.narrow(2, 0, 0) : torch::cat(outs, 2);
  r.final = T > 0 ? last : st.anchor;
  r.carry = st;
  return finish(r, v);
}

}  // namespace

TTTResult ttt_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                    const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  return chunk_impl(q, k, v, row, col, ln_w, ln_b, state, opt, true);
}

TTTResult ttt_chunk_composed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                             const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  return chunk_impl(q, k, v, row, col, ln_w, ln_b, state, opt, false);
}

}  // namespace mnemo
