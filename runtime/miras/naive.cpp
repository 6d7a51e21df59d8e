// Miras kernels (see miras.h): the token-by-token form (miras_recurrent), the reference of the chunk form
// (chunk.cpp), whose token steps (the rest of a chunk, Memora's lag token) are the ones here.
#include "core/common.h"
#include "runtime/miras/fused_lag.h"
#include "runtime/miras/prepare.h"

namespace mnemo {

namespace miras_detail {

// Memora's lag-token update of the single token x from the current weights (in place on st); `fused`: as one
// autograd node (fused_lag.h), else op by op (the reference the node is tested against).
torch::Tensor lag_step(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o, bool fused) {
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

}  // namespace miras_detail

MirasResult miras_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                            const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                            const MirasOptions& opt) {
  using miras_detail::finish, miras_detail::prepare, miras_detail::recurrent_impl;
  auto p = prepare(q, k, v, log_alpha, eta, delta, gamma, beta, state, opt);
  MirasState st = p.st;
  auto outs = recurrent_impl(p, p.x, st, opt);
  return finish(p, outs, st, v);
}

}  // namespace mnemo
