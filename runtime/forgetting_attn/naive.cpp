// Token-by-token forgetting attention (docs/models.md#forgetting-transformer) and the shape checks.
#include <vector>

#include "core/common.h"
#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_forgetting_attention_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& c_q, const torch::Tensor& c_k) {
  const std::string op = "forgetting_attn";
  if (!q.defined() || !k.defined() || !v.defined() || !c_q.defined() || !c_k.defined())
    throw Error(op + ": q, k, v and the forget gates are required");
  if (q.dim() != 4) throw Error(op + ": q must be [B, T, H, D], got " + c10::str(q.sizes()));
  const int64_t B = q.size(0), Tq = q.size(1), H = q.size(2), D = q.size(3);
  check_shape(op, "k", k, {B, -1, H, D});
  const int64_t Tk = k.size(1);
  if (Tk < Tq) throw Error(op + ": " + std::to_string(Tq) + " queries but only " + std::to_string(Tk) + " keys");
  check_shape(op, "v", v, {B, Tk, H, -1});
  check_shape(op, "log forget gates at the queries", c_q, {B, Tq, H});
  check_shape(op, "log forget gates at the keys", c_k, {B, Tk, H});
}

torch::Tensor forgetting_attention_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& log_f, double scale) {
  check_forgetting_attention_inputs(q, k, v, log_f, log_f);
  const AutocastOff autocast_off;
  const auto dt = recurrence_dtype({q, k, v, log_f});
  const int64_t T = q.size(1);
  auto qc = q.to(dt) * scale, kc = k.to(dt), vc = v.to(dt);
  auto c = log_f.to(dt).cumsum(1);  // [B, T, H]
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto keys = kc.narrow(1, 0, t + 1), values = vc.narrow(1, 0, t + 1);                // [B, t+1, H, D]
    auto logits = (qc.select(1, t).unsqueeze(1) * keys).sum(-1)                          // [B, t+1, H]
                  + c.select(1, t).unsqueeze(1) - c.narrow(1, 0, t + 1);                 // + c_t − c_j
    auto p = torch::softmax(logits, 1);
    outs.push_back((p.unsqueeze(-1) * values).sum(1));                                  // [B, H, D]
  }
  auto o = T > 0 ? torch::stack(outs, 1) : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options());
  return o.to(v.scalar_type());
}

}  // namespace mnemo
