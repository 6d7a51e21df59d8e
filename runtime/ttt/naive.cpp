// TTT kernels (see ttt.h; docs/models.md#ttt): the token-by-token reference form (ttt_recurrent), and its token
// steps that the dual form (chunk.cpp) runs to finish a mini-batch. The shared preparation is prepare.h.
#include "core/common.h"
#include "runtime/ttt/prepare.h"

namespace mnemo {

namespace ttt_detail {

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

}  // namespace ttt_detail

TTTResult ttt_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                        const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt) {
  using ttt_detail::finish, ttt_detail::prepare, ttt_detail::recurrent_impl;
  auto p = prepare(q, k, v, row, col, ln_w, ln_b, state, opt);
  return finish(recurrent_impl(p, p.state, 0, q.size(1), opt), v);
}

}  // namespace mnemo
