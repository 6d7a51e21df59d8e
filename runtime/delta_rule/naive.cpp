// Token-by-token (recurrent) delta rule / gated delta rule (docs/models.md#deltanet, docs/models.md#gated-deltanet), and the input
// checks shared with the chunk form.
#include <vector>

#include "core/common.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }

}  // namespace

void check_delta_rule_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& beta, const torch::Tensor& g,
                             const torch::Tensor& initial_state) {
  if (!q.defined() || !k.defined() || !v.defined() || !beta.defined())
    throw Error("delta rule: q, k, v and beta are required");
  if (q.dim() != 4) throw Error("delta rule: q must be [B, T, H, K], got " + shape_of(q));
  if (k.sizes() != q.sizes())
    throw Error("delta rule: k must have q's shape " + shape_of(q) + ", got " + shape_of(k));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  if (v.dim() != 4 || v.size(0) != B || v.size(1) != T || v.size(2) != H)
    throw Error("delta rule: v must be [B, T, H, V] with B, T, H of q " + shape_of(q) + ", got " + shape_of(v));
  const std::vector<int64_t> bth = {B, T, H};
  if (beta.sizes() != torch::IntArrayRef(bth))
    throw Error("delta rule: beta must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) + ", got " +
                shape_of(beta));
  if (g.defined() && g.sizes() != torch::IntArrayRef(bth))
    throw Error("delta rule: g must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) + ", got " +
                shape_of(g));
  const std::vector<int64_t> state = {B, H, K, v.size(3)};
  if (initial_state.defined() && initial_state.sizes() != torch::IntArrayRef(state))
    throw Error("delta rule: initial_state must be [B, H, K, V] = " + c10::str(torch::IntArrayRef(state)) +
                ", got " + shape_of(initial_state));
}

DeltaRuleResult delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& beta, const torch::Tensor& g,
                                     const torch::Tensor& initial_state, double scale) {
  check_delta_rule_inputs(q, k, v, beta, g, initial_state);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype({q, k, v, beta, g, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  auto qc = q.to(dt) * scale, kc = k.to(dt), vc = v.to(dt), bc = beta.to(dt);
  auto decay = g.defined() ? g.to(dt).exp() : torch::Tensor();

  auto S = initial_state.defined() ? initial_state.to(dt)
                                   : torch::zeros({B, H, K, V}, q.options().dtype(dt));
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    if (decay.defined()) S = S * decay.select(1, t).unsqueeze(-1).unsqueeze(-1);  // S' = exp(g_t) S
    auto k_t = kc.select(1, t);                                                    // [B, H, K]
    auto kS = torch::matmul(k_t.unsqueeze(-2), S).squeeze(-2);                     // k_t S' [B, H, V]
    auto u = bc.select(1, t).unsqueeze(-1) * (vc.select(1, t) - kS);               // u_t
    S = S + k_t.unsqueeze(-1) * u.unsqueeze(-2);                                   // S' + k_t^T u_t
    outs.push_back(torch::matmul(qc.select(1, t).unsqueeze(-2), S).squeeze(-2));   // q_t S_t
  }
  auto o = T > 0 ? torch::stack(outs, 1) : torch::zeros({B, 0, H, V}, q.options().dtype(dt));
  return {o.to(v.scalar_type()), S};
}

}  // namespace mnemo
