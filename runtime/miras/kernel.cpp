// Miras kernels (see miras.h). Reuses the deep-memory core (runtime/deep_memory/memory.h) for the
// forward pass, the closed-form inner gradients (rank-1 terms) and materialised reads; the channel-wise
// dual form (decays on the d_h axis, which the core's scalar DualCoefficients lack) is here.
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

#include "core/common.h"
#include "runtime/miras/miras.h"
#include "runtime/miras/fused_lag.h"
#include "runtime/miras/fused_segment.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"

namespace mnemo {

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }
torch::Tensor tr(const torch::Tensor& w) { return w.transpose(-1, -2); }

// Per-token inputs of a run of tokens: q, k, v [B, H, n, d]; la, eta [B, H, n, G]; delta [B, H, n] (or undefined).
struct Seq {
  torch::Tensor q, k, v, la, eta, delta;
  int64_t len() const { return q.size(2); }
};

// Consecutive pieces of `sizes` tokens. One split (not a narrow per piece): a narrow's backward allocates a
// zero gradient of the whole sequence, which made the chunk loop's backward quadratic in T.
std::vector<Seq> split_seq(const Seq& x, const std::vector<int64_t>& sizes) {
  auto sp = [&](const torch::Tensor& t) {
    return t.defined() ? t.split_with_sizes(sizes, 2) : std::vector<torch::Tensor>(sizes.size());
  };
  auto q = sp(x.q), k = sp(x.k), v = sp(x.v), la = sp(x.la), eta = sp(x.eta), delta = sp(x.delta);
  std::vector<Seq> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back({q[i], k[i], v[i], la[i], eta[i], delta[i]});
  return out;
}

struct Prepared {
  Seq x;                                  // [B, H, T, ·]
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
  if (o.sub_chunk < 1) throw Error("miras: sub_chunk must be >= 1, got " + std::to_string(o.sub_chunk));
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
  p.x.q = q.to(dt).transpose(1, 2);
  p.x.k = k.to(dt).transpose(1, 2);
  p.x.v = v.to(dt).transpose(1, 2);
  p.x.la = la.to(dt).transpose(1, 2);
  p.x.eta = eta.to(dt).transpose(1, 2);
  if (delta.defined()) p.x.delta = delta.to(dt).transpose(1, 2);
  p.norm.gamma = gamma.to(dt).view({1, H, 1, d});
  p.norm.beta = beta.to(dt).view({1, H, 1, d});
  for (const auto& w : st.cur) p.st.cur.push_back(w.to(dt));
  for (const auto& w : st.anchor) p.st.anchor.push_back(w.to(dt));
  p.st.pos = st.pos;
  p.G = la.size(3);
  p.d = d;
  return p;
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
  auto g = miras_bias_gradient(acts.out - V, delta, o);
  return memory_grad_terms(p.spec, w, acts, g, p.norm);
}

// Memora's lag-token update of the single token x from the current weights (in place on st); `fused`: as one
// autograd node (fused_lag.h), else op by op (the reference the node is tested against).
torch::Tensor lag_step(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o, bool fused = false) {
  if (fused) {
    auto r = miras_fused_lag({x.q, x.k, x.v, x.la, x.eta, x.delta, p.norm.gamma, p.norm.beta, st.cur}, o);
    st.cur = r.next;
    st.anchor = r.next;
    return r.out;
  }
  auto terms = grad_terms(p, st.cur, x.k, x.v, x.delta, o);
  auto G = per_token_grads(terms);  // [B, H, 1, out, in]
  auto a = x.la.squeeze(2).exp(), e = x.eta.squeeze(2);  // [B, H, G]
  MemoryWeights next;
  for (size_t l = 0; l < 2; ++l) {
    auto logits = gate_on(a, l) * torch::log(st.cur[l].clamp_min(o.kl_floor)) - gate_on(e, l) * G[l].squeeze(2);
    next.push_back(torch::softmax(logits, -1));
  }
  st.cur = next;
  st.anchor = next;
  return memory_apply(p.spec, st.cur, x.q, p.norm);
}

// The tokens of x one by one.
std::vector<torch::Tensor> recurrent_impl(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o) {
  std::vector<torch::Tensor> outs;
  if (x.len() == 0) return outs;
  for (const auto& t : split_seq(x, std::vector<int64_t>(x.len(), 1))) {
    if (st.pos == 0 && o.retention == "kl") {
      outs.push_back(lag_step(p, t, st, o));
    } else {
      if (st.pos == 0) st.anchor = st.cur;
      auto sc = scales(st.anchor, o);
      auto terms = grad_terms(p, scaled(st.anchor, sc), t.k, t.v, t.delta, o);
      auto G = per_token_grads(terms);
      auto a = t.la.squeeze(2).exp(), e = t.eta.squeeze(2);
      for (size_t l = 0; l < 2; ++l) st.cur[l] = gate_on(a, l) * st.cur[l] - gate_on(e, l) * G[l].squeeze(2);
      outs.push_back(memory_apply(p.spec, scaled(st.cur, sc), t.q, p.norm));
    }
    st.pos = (st.pos + 1) % o.chunk;
  }
  return outs;
}

torch::Tensor pad_rows(const torch::Tensor& x, int64_t N) {  // zero rows n .. N-1 on the token axis (dim 2)
  const int64_t n = x.size(2);
  return n == N ? x : torch::constant_pad_nd(x, {0, 0, 0, N - n});
}

// Read-out u of the segment when the decays factorise (chunking.h decay_factorisable: every e^{±b} within range):
// Γ_ts = e^{b_t} e^{-b_s}, so each pair sum is one masked matmul of diagonally scaled operands (no [n, n, G] Γ).
torch::Tensor factorised_readout(const MirasState& st, const RankOneTerms& terms,
                                 const torch::Tensor& Q, const torch::Tensor& bn, const torch::Tensor& eb,
                                 const torch::Tensor& ke, const torch::Tensor& ge, const std::vector<torch::Tensor>& sc) {
  const int64_t n = Q.size(2);
  auto ebi = (-bn).exp();
  auto mask = causal_mask(n, Q.device()).to(Q.scalar_type());
  auto A0 = torch::matmul(Q * eb, tr(ke * ebi)) * mask;  // Σ_G q_t z̃_s η_s Γ_ts, s ≤ t
  auto h = torch::matmul(Q * eb, tr(st.cur[0])) - torch::matmul(A0, terms.cols[0]);
  if (sc[0].defined()) h = h * sc[0];
  auto a = gelu_safe(h);
  auto S1 = torch::matmul(a, tr(terms.rows[1])) * mask;  // a_t · a_s(anchor), s ≤ t
  auto u = eb * (torch::matmul(a, tr(st.cur[1])) - torch::matmul(S1, ge * ebi));
  if (sc[1].defined()) u = u * sc[1];
  return u;
}

// Read-out u with sub-chunks of c tokens (GLA-style secondary chunking, stability rule 4), for decays too strong to
// factorise over the whole segment: for a query t in sub-chunk I and a source s in an earlier sub-chunk,
// Γ_ts = exp(b_t - b_r) · exp(b_r - b_s) with r = I·c - 1 (both exponents ≤ 0), so the pair sums are matmuls of
// diag-scaled operands; only the diagonal c×c blocks materialise Γ [.., c, c, G].
torch::Tensor subchunk_readout(const Seq& x, const MirasState& st, const RankOneTerms& terms,
                               const torch::Tensor& eb, const torch::Tensor& ke, const torch::Tensor& ge,
                               const std::vector<torch::Tensor>& sc, const MirasOptions& o) {
  const auto& Q = x.q;
  const auto& eta = x.eta;
  const int64_t n = x.len();
  const int64_t c = std::min(o.sub_chunk, n), m = (n + c - 1) / c, N = m * c;
  const int64_t Bn = Q.size(0), H = Q.size(1), G = eta.size(3);
  auto blk = [&](const torch::Tensor& x) { return pad_rows(x, N).view({Bn, H, m, c, x.size(-1)}); };
  auto b = pad_rows(x.la, N).cumsum(2);  // [B, H, N, G]; padded tokens keep b constant
  auto b5 = b.view({Bn, H, m, c, G});
  auto opts = b.options();
  // Diagonal blocks: Γ_ts = exp(b_t - b_s), s ≤ t (clamped, then masked: no exp of a positive number).
  auto tri = torch::ones({c, c}, opts).tril().unsqueeze(-1);
  auto Gd = (b5.unsqueeze(4) - b5.unsqueeze(3)).clamp_max(0.0).exp() * tri;  // [B, H, m, t, s, G]
  // Per head one [N, N] (or [N, m·N]) matmul and the I = I' blocks of it, rather than m small matmuls per head
  // (LibTorch's CPU bmm pays a per-matrix overhead that dominated at b = 64).
  auto diag_blocks = [&](const torch::Tensor& x /*[B, H, N, m·w]*/) {  // rows of block I, columns I·w .. I·w+w-1
    return x.view({Bn, H, m, c, m, -1}).diagonal(0, 2, 4).permute({0, 1, 4, 2, 3});  // [B, H, m, c, w]
  };
  auto ke5 = blk(ke), ge5 = blk(ge);
  auto A0 = (blk(Q).unsqueeze(4) * (ke5.unsqueeze(3) * Gd)).sum(-1);  // diagonal blocks [B, H, m, c, c]
  torch::Tensor Lq, Rk;
  if (m > 1) {
    // reference b_r per sub-chunk (r = I·c - 1; b_{-1} = 0)
    auto bref = torch::cat({torch::zeros({Bn, H, 1, G}, opts), b5.select(3, c - 1).narrow(2, 0, m - 1)}, 2);
    Lq = (b5 - bref.unsqueeze(3)).clamp_max(0.0).exp();  // exp(b_t - b_r) [B, H, m, c, G]
    auto before = (torch::arange(N, opts).unsqueeze(0) < (torch::arange(m, opts) * c).unsqueeze(1)).to(opts.dtype());
    Rk = (bref.unsqueeze(3) - b.unsqueeze(2)).clamp_max(0.0).exp() * before.unsqueeze(-1);  // exp(b_r - b_s) [B, H, m, N, G]
    auto KR = (pad_rows(ke, N).unsqueeze(2) * Rk).view({Bn, H, m * N, -1});
    auto off = diag_blocks(torch::matmul((blk(Q) * Lq).view({Bn, H, N, -1}), tr(KR)));  // [B, H, m, c, N]
    A0 = off.reshape({Bn, H, N, N}) + (A0.unsqueeze(4) * torch::eye(m, opts).view({m, 1, m, 1})).view({Bn, H, N, N});
  }
  auto h = torch::matmul(Q * eb, tr(st.cur[0])) -
           torch::matmul(A0.view({Bn, H, N, N}), pad_rows(terms.cols[0], N)).narrow(2, 0, n);
  if (sc[0].defined()) h = h * sc[0];
  auto a = gelu_safe(h);
  // Layer 1 (W_1): decay on output channels; S1_ts = a_t · a_s(anchor).
  auto S1 = torch::matmul(pad_rows(a, N), tr(pad_rows(terms.rows[1], N)));  // [B, H, N, N]
  auto S1d = m > 1 ? diag_blocks(S1) : S1.unsqueeze(2);
  auto upair = (S1d.unsqueeze(-1) * Gd * ge5.unsqueeze(3)).sum(4);  // [B, H, m, c, d]
  if (m > 1) {
    auto GR = (pad_rows(ge, N).unsqueeze(2) * Rk).permute({0, 1, 3, 2, 4}).reshape({Bn, H, N, -1});  // [B, H, N, m·d]
    upair = upair + Lq * diag_blocks(torch::matmul(S1, GR));
  }
  auto u = eb * torch::matmul(a, tr(st.cur[1])) - upair.view({Bn, H, N, -1}).narrow(2, 0, n);
  if (sc[1].defined()) u = u * sc[1];
  return u;
}

// Linear segment x from st.cur with gradients at st.anchor (dual form); updates st.cur. The read-out factorises the
// decays when their span allows it, else it sub-chunks (the two functions above).
torch::Tensor dual_segment(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o) {
  const auto& Q = x.q;
  const auto& eta = x.eta;
  const int64_t n = x.len();
  auto sc = scales(st.anchor, o);
  if (o.factorise_decays && o.fused_segment) {
    MirasSegmentInputs in{x.q, x.k, x.v, x.la, x.eta, x.delta, p.norm.gamma, p.norm.beta, scaled(st.anchor, sc),
                          st.cur, sc[0], sc[1]};
    auto r = miras_fused_segment(in, o);
    st.cur = r.end;
    return r.out;
  }
  auto terms = grad_terms(p, scaled(st.anchor, sc), x.k, x.v, x.delta, o);
  auto bn = x.la.cumsum(2);  // [B, H, n, G] cumulative log decay inside the segment (≤ 0)
  auto eb = bn.exp();
  auto ke = terms.rows[0] * eta;  // z̃_s ⊙ η_s
  auto ge = terms.cols[1] * eta;  // g_s ⊙ η_s
  torch::Tensor u;
  if (o.factorise_decays) {  // miras_chunk checked the span once for every segment
    u = factorised_readout(st, terms, Q, bn, eb, ke, ge, sc);
  } else {
    u = subchunk_readout(x, st, terms, eb, ke, ge, sc, o);
  }
  auto mu = u.mean(-1, true);
  auto var = (u - mu).pow(2).mean(-1, true);
  auto out = Q + (u - mu) / torch::sqrt(var + p.spec.ln_eps) * p.norm.gamma + p.norm.beta;
  // Weights at the segment's last token: Γ_{n-1, s} = exp(b_{n-1} - b_s).
  auto bl = bn.select(2, n - 1);                                   // [B, H, G]
  auto gl = (bl.unsqueeze(2) - bn).clamp_max(0.0).exp();          // [B, H, n, G]
  auto el = bl.exp();
  MemoryWeights end;
  end.push_back(st.cur[0] * el.unsqueeze(-2) - torch::matmul(tr(terms.cols[0]), ke * gl));
  end.push_back(el.unsqueeze(-1) * st.cur[1] - torch::matmul(tr(ge * gl), terms.rows[1]));
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

torch::Tensor miras_bias_gradient(const torch::Tensor& e, const torch::Tensor& delta, const MirasOptions& o,
                                  torch::Tensor* huber_switch) {
  if (o.bias == "l2") return e;
  if (o.bias == "lp") return o.p * e * (e * e + o.lp_eps).pow((o.p - 2.0) / 2.0);
  auto dl = delta.unsqueeze(-1);
  torch::Tensor mask;
  {
    torch::NoGradGuard no_grad;
    auto rms = e.pow(2).mean(-1, true).sqrt();
    mask = (rms <= dl).to(e.scalar_type());
  }
  if (huber_switch) *huber_switch = mask;
  return mask * e + (1.0 - mask) * dl * e / torch::sqrt(e * e + o.huber_eps);
}

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
  auto outs = recurrent_impl(p, p.x, st, opt);
  return finish(p, outs, st, v);
}

MirasResult miras_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                        const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                        const MirasOptions& opt) {
  auto p = prepare(q, k, v, log_alpha, eta, delta, gamma, beta, state, opt);
  const int64_t T = q.size(1), b = opt.chunk;
  const bool kl = opt.retention == "kl";
  // The segments' read-outs factorise their decays when the span of every in-segment cumulative log α allows
  // (chunking.h decay_factorisable). log α ≤ 0, so a segment (≤ b consecutive tokens) spans at most the most negative
  // sum of b consecutive log α: one check (one device sync) per call, not one per chunk.
  MirasOptions seg_opt = opt;
  if (opt.factorise_decays && T > 0) {
    auto c = p.x.la.cumsum(2);  // [B, H, T, G]
    auto window_sums = T > b ? torch::cat({c.narrow(2, b - 1, 1), c.narrow(2, b, T - b) - c.narrow(2, 0, T - b)}, 2)
                             : c.narrow(2, T - 1, 1);
    seg_opt.factorise_decays = decay_factorisable(window_sums);
  }
  MirasState st = p.st;
  // Pieces: the rest of the current chunk (token by token), then per chunk [lag token,] linear segment.
  enum Kind { Rest, Lag, Segment };
  std::vector<int64_t> sizes;
  std::vector<Kind> kinds;
  auto add = [&](int64_t n, Kind k) {
    if (n > 0) sizes.push_back(n), kinds.push_back(k);
  };
  int64_t t0 = st.pos > 0 ? std::min(T, b - st.pos) : 0;
  add(t0, Rest);
  for (; t0 < T; t0 += b) {
    const int64_t c = std::min(b, T - t0);
    if (kl) add(1, Lag);
    add(c - (kl ? 1 : 0), Segment);
  }
  const auto pieces = split_seq(p.x, sizes);
  std::vector<torch::Tensor> outs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (kinds[i] == Rest) {
      auto o = recurrent_impl(p, pieces[i], st, opt);
      outs.insert(outs.end(), o.begin(), o.end());
      continue;
    }
    if (kinds[i] == Lag) {
      outs.push_back(lag_step(p, pieces[i], st, opt, opt.fused_segment));
      st.pos = 1 % b;
      continue;
    }
    if (!kl) st.anchor = st.cur;
    outs.push_back(dual_segment(p, pieces[i], st, seg_opt));
    st.pos = (st.pos + pieces[i].len()) % b;
  }
  return finish(p, outs, st, v);
}

}  // namespace mnemo
