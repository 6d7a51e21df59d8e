// Token-by-token scalar-decay linear attention (docs/models.md#retnet) and RetNet's fixed decays.
#include <cmath>

#include "runtime/retnet/retnet.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_simple_gla_inputs(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& s0) {
  check_shape(op, "q", q, {-1, -1, -1, -1});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape(op, "k", k, {B, T, H, K});
  check_shape(op, "v", v, {B, T, H, -1});
  check_shape(op, "g", g, {B, T, H});
  if (s0.defined()) check_shape(op, "initial_state", s0, {B, H, K, v.size(3)});
}

RecurrentResult simple_gla_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& g, double scale,
                                     const torch::Tensor& initial_state) {
  check_simple_gla_inputs("simple_gla_recurrent", q, k, v, g, initial_state);
  check_chunking("simple_gla_recurrent", q.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qf = q.to(dt) * scale, kf = k.to(dt), vf = v.to(dt);
  auto decay = g.to(dt).exp();  // [B, T, H]
  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, qf.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto kt = kf.select(1, t), vt = vf.select(1, t);
    S = decay.select(1, t).unsqueeze(-1).unsqueeze(-1) * S + kt.unsqueeze(-1) * vt.unsqueeze(-2);
    outs.push_back(torch::matmul(qf.select(1, t).unsqueeze(-2), S).squeeze(-2));
  }
  return {torch::stack(outs, 1).to(q.scalar_type()), S};
}

torch::Tensor retnet_log_decay(int64_t n_heads, const torch::TensorOptions& options) {
  std::vector<double> g(n_heads);
  for (int64_t h = 0; h < n_heads; ++h) g[h] = std::log1p(-std::pow(2.0, -5.0 - h));
  return torch::tensor(g, torch::TensorOptions().dtype(torch::kFloat64)).to(options);
}

static torch::Tensor retention_gates(const torch::Tensor& q) {
  auto g = retnet_log_decay(q.size(2), q.options().dtype(recurrence_dtype(q)));
  return g.view({1, 1, -1}).expand({q.size(0), q.size(1), q.size(2)});
}

RecurrentResult retention_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, double scale,
                                    const torch::Tensor& initial_state) {
  check_shape("retention_recurrent", "q", q, {-1, -1, -1, -1});
  return simple_gla_recurrent(q, k, v, retention_gates(q), scale, initial_state);
}

RecurrentResult retention_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                double scale, const torch::Tensor& initial_state, int64_t chunk_size) {
  check_shape("retention_chunk", "q", q, {-1, -1, -1, -1});
  return simple_gla_chunk(q, k, v, retention_gates(q), scale, initial_state, chunk_size);
}

}  // namespace mnemo
