// Miras kernels (see miras.h). Reuses the deep-memory core (runtime/deep_memory/memory.h) for the
// forward pass, the closed-form inner gradients (rank-1 terms) and materialised reads; the channel-wise
// dual form ([B, H, n, n, G] decays on the d_h axis, which the core's scalar DualCoefficients lack) is here.
//
// Channel-wise dual form of one linear segment of n tokens starting from weights W^b (decayed term) with
// gradients at the anchor W^0 (rank-1 terms cols_s rows_s^T per matrix), b_t = Σ_{r ≤ t} log α_r (in-segment),
// Γ_ts = exp(b_t - b_s) (s ≤ t, masked before exp, clamped ≤ 0):
//   W_2,t = W_2^b diag(e^{b_t}) - Σ_s δ_s (z̃_s ⊙ η_s ⊙ Γ_ts)^T            (decay on input channels)
//   W_1,t = diag(e^{b_t}) W_1^b - Σ_s (g_s ⊙ η_s ⊙ Γ_ts) a_s^T             (decay on output channels)
//   h_t = W_2,t z_t = W_2^b (e^{b_t} ⊙ z_t) - Σ_s [Σ_i z_ti z̃_si η_si Γ_tsi] δ_s
//   u_t = W_1,t a_t = e^{b_t} ⊙ (W_1^b a_t) - Σ_s (a_t · a_s) (g_s ⊙ η_s ⊙ Γ_ts)
// (Moneta multiplies h and u by its frozen per-matrix scale 1/||A^0||_q^{q-2}.)
#include <limits>

#include "runtime/common.h"
#include "runtime/miras/miras.h"

namespace mnemo {

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }
torch::Tensor tr(const torch::Tensor& w) { return w.transpose(-1, -2); }

struct Prepared {
  torch::Tensor q, k, v, la, eta, delta;  // [B, H, T, d] / [B, H, T, G] / [B, H, T]
  MemoryNorm norm;                        // γ, β [1, H, 1, d]
  DeepMemorySpec spec;
  MirasState st;
  int64_t G = 1, d = 0;
};

void check_options(const MirasOptions& o) {
  if (o.bias != "l2" && o.bias != "huber" && o.bias != "lp")
    throw Error("miras: bias must be \"l2\", \"huber\" or \"lp\", got \"" + o.bias + "\"");
  if (o.retention != "l2" && o.retention != "lq" && o.retention != "kl")
    throw Error("miras: retention must be \"l2\", \"lq\" or \"kl\", got \"" + o.retention + "\"");
  if (o.chunk < 1) throw Error("miras: chunk must be >= 1, got " + std::to_string(o.chunk));
  if (o.bias == "lp" && !(o.p >= 1)) throw Error("miras: p must be >= 1, got " + std::to_string(o.p));
  if (o.retention == "lq" && !(o.q >= 1)) throw Error("miras: q must be >= 1, got " + std::to_string(o.q));
}

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& delta, const torch::Tensor& gamma,
                 const torch::Tensor& beta, const MirasState& st, const MirasOptions& opt) {
  check_options(opt);
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.sizes() != q.sizes())
    throw Error("miras: q, k, v must be [B, T, H, d] of one shape, got " + shape_of(q) + ", " + shape_of(k) + ", " +
                shape_of(v));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), d = q.size(3);
  if (la.dim() != 4 || la.size(0) != B || la.size(1) != T || la.size(2) != H ||
      (la.size(3) != d && la.size(3) != 1) || eta.sizes() != la.sizes())
    throw Error("miras: log_alpha and eta must be [B, T, H, d] or [B, T, H, 1] (one shape), got " + shape_of(la) +
                " and " + shape_of(eta));
  if (opt.bias == "huber" && (!delta.defined() || delta.sizes() != torch::IntArrayRef({B, T, H})))
    throw Error("miras: the huber bias needs delta [B, T, H], got " + (delta.defined() ? shape_of(delta) : "none"));
  Prepared p;
  p.spec.kind = MemoryKind::ResidualMLP_LN;
  p.spec.d_in = p.spec.d_out = d;
  p.spec.expansion = opt.expansion;
  p.spec.ln_eps = opt.ln_eps;
  p.spec.validate("miras");
  if (st.cur.size() != 2) throw Error("miras: the state needs 2 memory weights, got " + std::to_string(st.cur.size()));
  const auto shapes = p.spec.weight_shapes();
  for (size_t l = 0; l < 2; ++l)
    if (st.cur[l].sizes() != torch::IntArrayRef({B, H, shapes[l][0], shapes[l][1]}))
      throw Error("miras: memory weight " + std::to_string(l) + " must be [B, H, " + std::to_string(shapes[l][0]) +
                  ", " + std::to_string(shapes[l][1]) + "], got " + shape_of(st.cur[l]));
  if (st.pos < 0 || st.pos >= opt.chunk)
    throw Error("miras: state position " + std::to_string(st.pos) + " outside the chunk [0, " +
                std::to_string(opt.chunk) + ")");
  if (st.pos > 0 && st.anchor.size() != 2) throw Error("miras: a state inside a chunk needs its anchor");
  auto dt = torch::kFloat32;
  for (const auto& t : {q, k, v, la, eta, st.cur[0]})
    if (t.scalar_type() == torch::kFloat64) dt = torch::kFloat64;
  p.q = q.to(dt).transpose(1, 2);
  p.k = k.to(dt).transpose(1, 2);
  p.v = v.to(dt).transpose(1, 2);
  p.la = la.to(dt).transpose(1, 2);
  p.eta = eta.to(dt).transpose(1, 2);
  if (delta.defined()) p.delta = delta.to(dt).transpose(1, 2);
  p.norm.gamma = gamma.to(dt).view({1, H, 1, d});
  p.norm.beta = beta.to(dt).view({1, H, 1, d});
  for (const auto& w : st.cur) p.st.cur.push_back(w.to(dt));
  for (const auto& w : st.anchor) p.st.anchor.push_back(w.to(dt));
  p.st.pos = st.pos;
  p.G = la.size(3);
  p.d = d;
  return p;
}

// g_y from e = M(k) - v; delta [B, H, n] (huber).
torch::Tensor output_gradient(const torch::Tensor& e, const torch::Tensor& delta, const MirasOptions& o) {
  if (o.bias == "l2") return e;
  if (o.bias == "lp") return o.p * e * (e * e + o.lp_eps).pow((o.p - 2.0) / 2.0);
  auto dl = delta.unsqueeze(-1);
  torch::Tensor mask;
  {
    torch::NoGradGuard no_grad;
    auto rms = e.pow(2).mean(-1, true).sqrt();
    mask = (rms <= dl).to(e.scalar_type());
  }
  return mask * e + (1.0 - mask) * dl * e / torch::sqrt(e * e + o.huber_eps);
}

// Per-matrix read/gradient scale: 1 / ||A^0||_q^{q-2} ("lq"), else undefined (1).
std::vector<torch::Tensor> scales(const MemoryWeights& anchor, const MirasOptions& o) {
  if (o.retention != "lq") return {torch::Tensor(), torch::Tensor()};
  return {1.0 / miras_lq_normaliser(anchor[0], o.q), 1.0 / miras_lq_normaliser(anchor[1], o.q)};
}

MemoryWeights scaled(const MemoryWeights& w, const std::vector<torch::Tensor>& sc) {
  MemoryWeights out;
  for (size_t l = 0; l < w.size(); ++l) out.push_back(sc[l].defined() ? w[l] * sc[l] : w[l]);
  return out;
}

// Gate broadcast onto a matrix: l = 0 (W_2 [hid, d]) on the input axis, l = 1 (W_1 [d, hid]) on the output axis.
torch::Tensor gate_on(const torch::Tensor& g /*[B, H, G]*/, size_t l) {
  return l == 0 ? g.unsqueeze(-2) : g.unsqueeze(-1);
}

// Rank-1 terms of the tokens z (keys) at weights w.
RankOneTerms grad_terms(const Prepared& p, const MemoryWeights& w, const torch::Tensor& K, const torch::Tensor& V,
                        const torch::Tensor& delta, const MirasOptions& o) {
  auto acts = memory_forward(p.spec, w, K, p.norm);
  auto g = output_gradient(acts.out - V, delta, o);
  return memory_grad_terms(p.spec, w, acts, g, p.norm);
}

torch::Tensor delta_at(const Prepared& p, int64_t t0, int64_t n) {
  return p.delta.defined() ? p.delta.narrow(2, t0, n) : torch::Tensor();
}

// Memora's lag-token update of token t from the current weights (in place on st).
torch::Tensor lag_step(const Prepared& p, MirasState& st, int64_t t, const MirasOptions& o) {
  auto terms = grad_terms(p, st.cur, p.k.narrow(2, t, 1), p.v.narrow(2, t, 1), delta_at(p, t, 1), o);
  auto G = per_token_grads(terms);  // [B, H, 1, out, in]
  auto a = p.la.select(2, t).exp(), e = p.eta.select(2, t);  // [B, H, G]
  MemoryWeights next;
  for (size_t l = 0; l < 2; ++l) {
    auto logits = gate_on(a, l) * torch::log(st.cur[l].clamp_min(o.kl_floor)) - gate_on(e, l) * G[l].squeeze(2);
    next.push_back(torch::softmax(logits, -1));
  }
  st.cur = next;
  st.anchor = next;
  return memory_apply(p.spec, st.cur, p.q.narrow(2, t, 1), p.norm);
}

// Tokens [from, from + n) token by token.
std::vector<torch::Tensor> recurrent_impl(const Prepared& p, MirasState& st, int64_t from, int64_t n,
                                          const MirasOptions& o) {
  std::vector<torch::Tensor> outs;
  for (int64_t t = from; t < from + n; ++t) {
    if (st.pos == 0 && o.retention == "kl") {
      outs.push_back(lag_step(p, st, t, o));
    } else {
      if (st.pos == 0) st.anchor = st.cur;
      auto sc = scales(st.anchor, o);
      auto terms = grad_terms(p, scaled(st.anchor, sc), p.k.narrow(2, t, 1), p.v.narrow(2, t, 1), delta_at(p, t, 1), o);
      auto G = per_token_grads(terms);
      auto a = p.la.select(2, t).exp(), e = p.eta.select(2, t);
      for (size_t l = 0; l < 2; ++l) st.cur[l] = gate_on(a, l) * st.cur[l] - gate_on(e, l) * G[l].squeeze(2);
      outs.push_back(memory_apply(p.spec, scaled(st.cur, sc), p.q.narrow(2, t, 1), p.norm));
    }
    st.pos = (st.pos + 1) % o.chunk;
  }
  return outs;
}

// Linear segment [t0, t0 + n) from st.cur with gradients at st.anchor (dual form); updates st.cur.
torch::Tensor dual_segment(const Prepared& p, MirasState& st, int64_t t0, int64_t n, const MirasOptions& o) {
  const int64_t d = p.d;
  auto Q = p.q.narrow(2, t0, n), K = p.k.narrow(2, t0, n), V = p.v.narrow(2, t0, n);
  auto sc = scales(st.anchor, o);
  auto terms = grad_terms(p, scaled(st.anchor, sc), K, V, delta_at(p, t0, n), o);
  const auto sizes = p.la.sizes();
  auto la = p.la.narrow(2, t0, n).expand({sizes[0], sizes[1], n, d});
  auto eta = p.eta.narrow(2, t0, n).expand({sizes[0], sizes[1], n, d});
  auto b = la.cumsum(2);  // [B, H, n, d]
  auto mask = torch::ones({n, n}, torch::TensorOptions().dtype(torch::kBool).device(Q.device())).tril();
  auto diff = (b.unsqueeze(3) - b.unsqueeze(2)).clamp_max(0.0);  // [B, H, t, s, d]
  auto Gam = diff.masked_fill(mask.logical_not().unsqueeze(-1), -std::numeric_limits<double>::infinity()).exp();
  auto eb = b.exp();
  // Layer 0 (W_2): decay on input channels.
  auto A0 = torch::einsum("bhti,bhsi,bhtsi->bhts", {Q, terms.rows[0] * eta, Gam});
  auto h = torch::matmul(Q * eb, tr(st.cur[0])) - torch::matmul(A0, terms.cols[0]);
  if (sc[0].defined()) h = h * sc[0];
  auto a = torch::gelu(h);
  // Layer 1 (W_1): decay on output channels.
  auto S1 = torch::matmul(a, tr(terms.rows[1])).masked_fill(mask.logical_not(), 0.0);
  auto u = eb * torch::matmul(a, tr(st.cur[1])) - torch::einsum("bhts,bhtsj,bhsj->bhtj", {S1, Gam, terms.cols[1] * eta});
  if (sc[1].defined()) u = u * sc[1];
  auto mu = u.mean(-1, true);
  auto var = (u - mu).pow(2).mean(-1, true);
  auto out = Q + (u - mu) / torch::sqrt(var + p.spec.ln_eps) * p.norm.gamma + p.norm.beta;
  // Weights at the segment's last token.
  auto gl = Gam.select(2, n - 1);  // [B, H, s, d]
  auto bl = eb.select(2, n - 1);   // [B, H, d]
  MemoryWeights end;
  end.push_back(st.cur[0] * bl.unsqueeze(-2) - torch::matmul(tr(terms.cols[0]), terms.rows[0] * eta * gl));
  end.push_back(bl.unsqueeze(-1) * st.cur[1] - torch::matmul(tr(terms.cols[1] * eta * gl), terms.rows[1]));
  st.cur = end;
  return out;
}

MirasResult finish(const Prepared& p, std::vector<torch::Tensor> outs, MirasState st, const torch::Tensor& v) {
  MirasResult r;
  r.o = outs.empty() ? v.narrow(1, 0, 0) : torch::cat(outs, 2).transpose(1, 2).contiguous().to(v.scalar_type());
  r.state = std::move(st);
  (void)p;
  return r;
}

}  // namespace

torch::Tensor miras_lq_normaliser(const torch::Tensor& A, double q) {
  if (q == 2.0) return torch::ones({A.size(0), A.size(1), 1, 1}, A.options());
  auto s = A.abs().pow(q).sum({-2, -1}, true);  // Σ |A|^q
  return s.pow((q - 2.0) / q);
}

MirasResult miras_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                            const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                            const MirasOptions& opt) {
  auto p = prepare(q, k, v, log_alpha, eta, delta, gamma, beta, state, opt);
  MirasState st = p.st;
  auto outs = recurrent_impl(p, st, 0, q.size(1), opt);
  return finish(p, outs, st, v);
}

MirasResult miras_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                        const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                        const MirasOptions& opt) {
  auto p = prepare(q, k, v, log_alpha, eta, delta, gamma, beta, state, opt);
  const int64_t T = q.size(1), b = opt.chunk;
  MirasState st = p.st;
  std::vector<torch::Tensor> outs;
  int64_t t0 = 0;
  if (st.pos > 0) {  // finish the current chunk token by token
    const int64_t n = std::min(T, b - st.pos);
    auto o = recurrent_impl(p, st, 0, n, opt);
    outs.insert(outs.end(), o.begin(), o.end());
    t0 = n;
  }
  for (; t0 < T; t0 += b) {
    const int64_t c = std::min(b, T - t0);
    int64_t s0 = t0, n = c;
    if (opt.retention == "kl") {
      outs.push_back(lag_step(p, st, t0, opt));
      s0 += 1;
      n -= 1;
    } else {
      st.anchor = st.cur;
    }
    if (n > 0) outs.push_back(dual_segment(p, st, s0, n, opt));
    st.pos = c % b;
  }
  return finish(p, outs, st, v);
}

}  // namespace mnemo
