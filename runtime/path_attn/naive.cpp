// Token-by-token PaTH attention (docs/models.md#path-attention): the decode form with the moving key cache, and the
// shape checks.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/path_attn/path_attn.h"

namespace mnemo {

void check_path_attention_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                 const torch::Tensor& c_k) {
  const std::string op = "path_attn";
  if (!q.defined() || !k.defined() || !v.defined() || !w.defined() || !beta.defined())
    throw Error(op + ": q, k, v, w and beta are required");
  if (q.dim() != 4) throw Error(op + ": q must be [B, T, HQ, D], got " + c10::str(q.sizes()));
  if (k.dim() != 4) throw Error(op + ": k must be [B, T, H, D], got " + c10::str(k.sizes()));
  const int64_t B = q.size(0), Tq = q.size(1), HQ = q.size(2), D = q.size(3), H = k.size(2);
  check_shape(op, "k", k, {B, -1, H, D});
  if (H < 1 || HQ % H != 0)
    throw Error(op + ": q has " + std::to_string(HQ) + " heads, not a multiple of k's " + std::to_string(H));
  const int64_t Tk = k.size(1);
  if (Tk < Tq) throw Error(op + ": " + std::to_string(Tq) + " queries but only " + std::to_string(Tk) + " keys");
  check_shape(op, "v", v, {B, Tk, H, -1});
  check_shape(op, "w", w, {B, Tq, H, D});
  check_shape(op, "beta", beta, {B, Tq, H});
  if (c_q.defined() != c_k.defined())
    throw Error(op + ": the forget gates at the queries and at the keys must be both given or both absent");
  if (c_q.defined()) {
    check_shape(op, "log forget gates at the queries", c_q, {B, Tq, HQ});
    check_shape(op, "log forget gates at the keys", c_k, {B, Tk, HQ});
  }
}

PathAttnHeads path_attention_heads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                   const torch::Tensor& c_k, torch::ScalarType dt) {
  PathAttnHeads x;
  x.B = q.size(0), x.Tq = q.size(1), x.HQ = q.size(2), x.D = q.size(3), x.H = k.size(2), x.G = x.HQ / x.H;
  x.Tk = k.size(1), x.Dv = v.size(3), x.offset = x.Tk - x.Tq;
  x.Q = q.to(dt).permute({0, 2, 1, 3}).reshape({x.B, x.H, x.G, x.Tq, x.D});
  x.K = k.to(dt).transpose(1, 2), x.V = v.to(dt).transpose(1, 2);
  x.W = w.to(dt).transpose(1, 2), x.Bt = beta.to(dt).transpose(1, 2);
  if (c_q.defined()) {
    x.Cq = c_q.to(dt).transpose(1, 2).reshape({x.B, x.H, x.G, x.Tq});
    x.Ck = c_k.to(dt).transpose(1, 2).reshape({x.B, x.H, x.G, x.Tk});
  }
  return x;
}

PathAttnResult path_attention_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                        const torch::Tensor& c_k, double scale) {
  check_path_attention_inputs(q, k, v, w, beta, c_q, c_k);
  const AutocastOff autocast_off;
  const auto dt = recurrence_dtype({q, k, v, w, beta});
  const auto [Q, K, V, W, Bt, Cq, Ck, B, Tq, HQ, D, H, G, Tk, Dv, offset] =
      path_attention_heads(q, k, v, w, beta, c_q, c_k, dt);
  const bool gated = c_q.defined();
  auto cache = K.narrow(2, 0, offset);  // keys transformed through the position before the first query
  std::vector<torch::Tensor> outs;
  outs.reserve(Tq);
  for (int64_t t = 0; t < Tq; ++t) {
    const int64_t pos = offset + t;
    auto wt = W.select(2, t).unsqueeze(2);                      // [B, H, 1, D]
    auto bt = Bt.select(2, t).unsqueeze(-1).unsqueeze(-1);      // [B, H, 1, 1]
    cache = cache - bt * (cache * wt).sum(-1, true) * wt;       // k_j ← (I − β_t w_t w_tᵀ) k_j, j < t
    cache = torch::cat({cache, K.narrow(2, pos, 1)}, 2);        // append k_t untransformed
    auto logits = torch::matmul(Q.select(3, t).unsqueeze(3), cache.unsqueeze(2).transpose(-1, -2)).squeeze(3);
    if (gated) logits = logits + Cq.select(3, t).unsqueeze(-1) - Ck.narrow(3, 0, pos + 1);  // [B, H, G, pos+1]
    auto p = torch::softmax(logits * scale, -1);
    outs.push_back(torch::matmul(p.unsqueeze(3), V.narrow(2, 0, pos + 1).unsqueeze(2)).squeeze(3));  // [B, H, G, Dv]
  }
  auto o = Tq > 0 ? torch::stack(outs, 3).reshape({B, HQ, Tq, Dv}).transpose(1, 2)
                  : torch::zeros({B, 0, HQ, Dv}, v.options().dtype(dt));
  return {o.to(v.scalar_type()), cache.transpose(1, 2).to(k.scalar_type())};
}

}  // namespace mnemo
