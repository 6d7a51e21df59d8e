// Titans LMM kernel (docs/models.md#titans): the chunk-wise dual form (titans_lmm_chunk, fused per chunk for the
// residual-MLP memory with momentum and decay, and titans_lmm_chunk_composed, op by op). The token-by-token
// reference is naive.cpp; the shared input preparation prepare.h.
#include <map>

#include "core/common.h"
#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/titans/prepare.h"

namespace mnemo {

namespace titans_detail {
namespace {

// Momentum/decay coefficients of every piece of the chunk loop (pieces start at pos, first one b - offset long):
// the full chunks in one batched call (their gates are known up front), the partial first/last pieces alone.
std::map<int64_t, MomentumChunkCoefficients> piece_coefficients(const Prepared& p, int64_t T, int64_t offset,
                                                                 int64_t b) {
  std::map<int64_t, MomentumChunkCoefficients> out;
  auto one = [&](int64_t pos, int64_t n) {
    out[pos] = momentum_chunk_coefficients(bh(p.lk, pos, n), bh(p.le, pos, n), bh(p.th, pos, n));
  };
  int64_t pos = 0;
  if (offset > 0 && T > 0) {
    const int64_t n = std::min(T, b - offset);
    one(pos, n);
    pos += n;
  }
  const int64_t m = (T - pos) / b;  // full chunks
  if (m > 0) {
    auto blocks = [&](const torch::Tensor& x) {  // [B, T, H] -> [B, H, m, b]
      auto y = bh(x, pos, m * b);
      return y.reshape({y.size(0), y.size(1), m, b});
    };
    auto all = momentum_chunk_coefficients(blocks(p.lk), blocks(p.le), blocks(p.th));
    auto A = all.dual.A.unbind(2), D = all.dual.D.unbind(2), C = all.dual.C.unbind(2);
    auto keep = all.mom_keep.unbind(2), mc = all.mom_c.unbind(2);
    for (int64_t i = 0; i < m; ++i) {
      MomentumChunkCoefficients c;
      c.dual.A = A[i], c.dual.D = D[i], c.dual.C = C[i], c.mom_keep = keep[i], c.mom_c = mc[i];
      out[pos + i * b] = c;
    }
    pos += m * b;
  }
  if (pos < T) one(pos, T - pos);
  return out;
}

TitansLmmResult chunk_impl(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                           const torch::Tensor& theta, const TitansMemoryState& init, int64_t chunk_size,
                           double inner_grad_clip, bool allow_fused) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  check_inputs(spec, q, k, v, log_keep, log_eta, theta, init, chunk_size, inner_grad_clip);
  auto p = prepare(q, k, v, log_keep, log_eta, theta, init);
  const bool fused = allow_fused && fused_chunk_supported(spec) && log_keep.defined() && log_eta.defined();
  const int64_t T = q.size(1);
  int64_t off = init.offset;
  std::map<int64_t, MomentumChunkCoefficients> coef_of;  // by piece start (fused form)
  if (fused) coef_of = piece_coefficients(p, T, init.offset, chunk_size);
  std::vector<torch::Tensor> ys;
  const auto sizes = chunk_piece_sizes(T, chunk_size, off);
  const auto qs = time_pieces(p.q, sizes), ks = time_pieces(p.k, sizes), vs = time_pieces(p.v, sizes),
             ths = time_pieces(p.th, sizes), lks = time_pieces(p.lk, sizes), les = time_pieces(p.le, sizes);
  int64_t pos = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const auto &qc = qs[i], &kc = ks[i], &vc = vs[i];         // [B, H, n, d]
    const auto &thc = ths[i], &lkc = lks[i], &lec = les[i];  // [B, H, n]
    if (fused) {
      const auto& co = coef_of.at(pos);
      auto at_end = [&](const torch::Tensor& x) { return x.select(-1, n - 1); };
      FusedChunkInputs in;
      in.q = qc, in.k = kc, in.v = vc;
      in.w = p.w, in.s = p.s, in.anchor = p.anchor;
      in.A = co.dual.A, in.D = co.dual.D, in.C = co.dual.C;
      in.a_end = at_end(co.dual.A), in.d_end = at_end(co.dual.D), in.c_end = co.dual.C.select(-2, n - 1);
      in.p_end = at_end(co.mom_keep), in.e_end = co.mom_c.select(-2, n - 1);
      auto r = fused_mlp_chunk(in, /*loss_l2=*/true, inner_grad_clip);
      ys.push_back(r.y);
      p.w = r.w;
      p.s = r.s;
      off += n;
      if (off == chunk_size) {
        off = 0;
        p.anchor = p.w;
      }
      pos += n;
      continue;
    }
    // Inner gradients at the anchor (ℓ2: g_y = M^0(k) - v), as rank-1 terms.
    auto acts = memory_forward(spec, p.anchor, kc);
    auto terms = clip_grad_terms(memory_grad_terms(spec, p.anchor, acts, acts.out - vc), inner_grad_clip);
    auto coef = momentum_chunk_coefficients(lkc, lec, thc);
    ys.push_back(dual_form_readout(spec, p.w, p.s, coef.dual, terms, qc));
    // Chunk-end state (token n-1 of this piece).
    auto last = [&](const torch::Tensor& t) { return t.defined() ? t.select(2, n - 1) : t; };
    auto w_end = combine_state(p.w, p.s, last(coef.dual.A), last(coef.dual.D), terms, coef.dual.C.select(2, n - 1));
    if (!p.s.empty()) p.s = combine_state(p.s, {}, last(coef.mom_keep), {}, terms, coef.mom_c.select(2, n - 1));
    p.w = w_end;
    off += n;
    if (off == chunk_size) {
      off = 0;
      p.anchor = p.w;
    }
    pos += n;
  }
  auto y = T > 0 ? torch::cat(ys, 2).transpose(1, 2)
                 : torch::zeros({q.size(0), 0, q.size(2), spec.d_out}, q.options().dtype(p.dt));
  return {y.to(v.scalar_type()), {p.w, p.s, p.anchor, off}};
}

}  // namespace
}  // namespace titans_detail

TitansLmmResult titans_lmm_chunk(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                                 const torch::Tensor& theta, const TitansMemoryState& init, int64_t chunk_size,
                                 double inner_grad_clip) {
  return titans_detail::chunk_impl(spec, q, k, v, log_keep, log_eta, theta, init, chunk_size, inner_grad_clip, true);
}

TitansLmmResult titans_lmm_chunk_composed(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v, const torch::Tensor& log_keep,
                                          const torch::Tensor& log_eta, const torch::Tensor& theta,
                                          const TitansMemoryState& init, int64_t chunk_size,
                                          double inner_grad_clip) {
  return titans_detail::chunk_impl(spec, q, k, v, log_keep, log_eta, theta, init, chunk_size, inner_grad_clip, false);
}

}  // namespace mnemo
