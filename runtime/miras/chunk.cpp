// Miras kernels (see miras.h): the chunk form (miras_chunk); the token-by-token form is naive.cpp, the shared
// preparation prepare.h. Reuses the deep-memory core (runtime/deep_memory/memory.h) for the
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
#include "runtime/miras/fused_segment.h"
#include "runtime/miras/prepare.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"

namespace mnemo {

namespace miras_detail {
namespace {

torch::Tensor tr(const torch::Tensor& w) { return w.transpose(-1, -2); }

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

}  // namespace
}  // namespace miras_detail

MirasResult miras_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                        const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                        const MirasOptions& opt) {
  using miras_detail::dual_segment, miras_detail::finish, miras_detail::lag_step, miras_detail::prepare,
      miras_detail::recurrent_impl, miras_detail::split_seq;
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
