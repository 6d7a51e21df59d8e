// Token-by-token linear attention (docs/models.md#linear-attention): the reference the chunked form is tested against.
#include "runtime/linear_attn/linear_attn.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_linear_attn_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                  const torch::Tensor& v, const torch::Tensor& s0, bool normalize,
                  const torch::Tensor& z0) {
  check_shape(op, "q", q, {-1, -1, -1, -1});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape(op, "k", k, {B, T, H, K});
  check_shape(op, "v", v, {B, T, H, -1});
  if (s0.defined()) check_shape(op, "initial_state", s0, {B, H, K, v.size(3)});
  if (normalize && z0.defined()) check_shape(op, "initial_z", z0, {B, H, K});
}

LinearAttnResult linear_attn_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, double scale,
                                       const torch::Tensor& initial_state, bool normalize,
                                       const torch::Tensor& initial_z) {
  check_linear_attn_inputs("linear_attn_recurrent", q, k, v, initial_state, normalize, initial_z);
  check_chunking("linear_attn_recurrent", q.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qf = q.to(dt) * scale, kf = k.to(dt), vf = v.to(dt);
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, qf.options());
  torch::Tensor z;
  if (normalize) z = initial_z.defined() ? initial_z.to(dt) : torch::zeros({B, H, K}, qf.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto qt = qf.select(1, t), kt = kf.select(1, t), vt = vf.select(1, t);  // [B, H, D]
    S = S + kt.unsqueeze(-1) * vt.unsqueeze(-2);
    auto o = torch::matmul(qt.unsqueeze(-2), S).squeeze(-2);  // [B, H, V]
    if (normalize) {
      z = z + kt;
      o = o / ((qt * z).sum(-1, true) + kLinearAttnDenominatorEps);
    }
    outs.push_back(o);
  }
  return {torch::stack(outs, 1).to(q.scalar_type()), S, z};
}

}  // namespace mnemo
