// TTT kernels (see ttt.h; docs/models.md#ttt, docs/models.md#deep-memory): the dual (chunked) form, per
// mini-batch one fused node (fused_chunk.cpp) for the 2-layer MLP with biases and inner LN, else op by op
// (ttt_chunk_composed). The token-by-token reference is naive.cpp; the anchor gradients and the shared preparation
// prepare.cpp.
//
// Dual read for a query x (layer input at the query side, x_1 = q̃), with the anchor pass's X_l, E_l:
//   Z_l(x_t) = x_t W_l + b_l - Σ_{s ≤ t} C[t,s] (x_t · X_{l,s} + 1) E_{l,s}
// i.e. one masked b×b matmul per layer (the "+1" is the inner bias seen as a constant input).
#include <limits>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/gelu.h"
#include "runtime/ttt/prepare.h"

namespace mnemo {

namespace ttt_detail {
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
}  // namespace ttt_detail

TTTResult ttt_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                    const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  return ttt_detail::chunk_impl(q, k, v, row, col, ln_w, ln_b, state, opt, true);
}

TTTResult ttt_chunk_composed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                             const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  return ttt_detail::chunk_impl(q, k, v, row, col, ln_w, ln_b, state, opt, false);
}

}  // namespace mnemo
