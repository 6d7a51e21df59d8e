// Token-by-token Gated Slot Attention (docs/models.md#gsa).
#include "runtime/gla/gla.h"
#include "runtime/gsa/gsa.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_gsa_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& s, const torch::Tensor& g, const torch::Tensor& key_slots0,
                      const torch::Tensor& value_slots0) {
  check_shape(op, "q", q, {-1, -1, -1, -1});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape(op, "k", k, {B, T, H, K});
  check_shape(op, "v", v, {B, T, H, -1});
  check_shape(op, "s", s, {B, T, H, -1});
  check_shape(op, "g", g, {B, T, H, s.size(3)});
  if (key_slots0.defined()) check_shape(op, "key_slots0", key_slots0, {B, H, K, s.size(3)});
  if (value_slots0.defined()) check_shape(op, "value_slots0", value_slots0, {B, H, s.size(3), v.size(3)});
}

GsaResult gsa_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& s,
                        const torch::Tensor& g, double scale, const torch::Tensor& key_slots0,
                        const torch::Tensor& value_slots0) {
  check_gsa_inputs("gsa_recurrent", q, k, v, s, g, key_slots0, value_slots0);
  check_chunking("gsa_recurrent", q.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), M = s.size(3);
  auto Q = q.to(ct) * scale, Kf = k.to(ct), S = s.to(ct), alpha = g.to(ct).exp();
  auto Kt = key_slots0.defined() ? key_slots0.to(ct) : torch::zeros({B, H, K, M}, Q.options());
  std::vector<torch::Tensor> scores;
  scores.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    // K̃_t = K̃_{t−1} Diag(α_t) + k_t s_tᵀ,  scores_t = scale q_tᵀ K̃_t
    Kt = Kt * alpha.select(1, t).unsqueeze(-2) + Kf.select(1, t).unsqueeze(-1) * S.select(1, t).unsqueeze(-2);
    scores.push_back(torch::matmul(Q.select(1, t).unsqueeze(-2), Kt).squeeze(-2));  // [B, H, M]
  }
  auto r = torch::softmax(torch::stack(scores, 1), -1);  // [B, T, H, M]
  // Ṽ_t = Diag(α_t) Ṽ_{t−1} + s_t v_tᵀ,  o_t = Ṽ_tᵀ r_t: GLA's recurrence with q = r, k = s.
  auto second = gla_recurrent(r, S, v.to(ct), g.to(ct), 1.0, value_slots0);
  return {second.o.to(q.scalar_type()), Kt, second.final_state};
}

}  // namespace mnemo
