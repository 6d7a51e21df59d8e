// Token-by-token GLA recurrence (docs/models.md#gla): the decay scales the state's key rows.
#include "runtime/gla/gla.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_gla_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                      const torch::Tensor& v, const torch::Tensor& gk, const torch::Tensor& s0) {
  check_shape(op, "q", q, {-1, -1, -1, -1});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape(op, "k", k, {B, T, H, K});
  check_shape(op, "v", v, {B, T, H, -1});
  check_shape(op, "gk", gk, {B, T, H, K});
  if (s0.defined()) check_shape(op, "initial_state", s0, {B, H, K, v.size(3)});
}

RecurrentResult gla_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& gk, double scale, const torch::Tensor& initial_state) {
  check_gla_inputs("gla_recurrent", q, k, v, gk, initial_state);
  check_chunking("gla_recurrent", q.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qf = q.to(dt) * scale, kf = k.to(dt), vf = v.to(dt);
  auto decay = gk.to(dt).exp();  // [B, T, H, K]
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, qf.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto kt = kf.select(1, t), vt = vf.select(1, t);
    S = decay.select(1, t).unsqueeze(-1) * S + kt.unsqueeze(-1) * vt.unsqueeze(-2);
    outs.push_back(torch::matmul(qf.select(1, t).unsqueeze(-2), S).squeeze(-2));
  }
  return {torch::stack(outs, 1).to(q.scalar_type()), S};
}

}  // namespace mnemo
