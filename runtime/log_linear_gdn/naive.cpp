// Token-by-token log-linear Gated DeltaNet / log-linear attention (docs/models.md#log-linear-gated-deltanet; arXiv
// 2506.04761 §3–4): one state per Fenwick level, the Fenwick carry after every token, and the input checks shared
// with the chunked form.
#include <algorithm>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"

namespace mnemo {

namespace log_linear_detail {

static std::string shape_str(const torch::Tensor& t) { return c10::str(t.sizes()); }

void carry(std::vector<torch::Tensor>& levels, int64_t p_next) {
  const int64_t NL = static_cast<int64_t>(levels.size());
  const int64_t c = __builtin_ctzll(static_cast<unsigned long long>(p_next));
  const int64_t target = std::min(c + 1, NL - 1);
  for (int64_t l = 0; l <= std::min(c, NL - 1); ++l) {
    if (l == target || !levels[l].defined()) continue;
    levels[target] = levels[target].defined() ? levels[target] + levels[l] : levels[l];
    levels[l] = torch::Tensor();
  }
}

torch::Tensor steps(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& beta,
                    const torch::Tensor& decay, const torch::Tensor& level_weights,
                    std::vector<torch::Tensor>& levels, int64_t p0) {
  const int64_t T = q.size(1), NL = static_cast<int64_t>(levels.size());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto k_t = k.select(1, t);                               // [B, H, K]
    auto k_col = k_t.unsqueeze(-1);                           // [B, H, K, 1]
    torch::Tensor a_t = decay.defined() ? decay.select(1, t).unsqueeze(-1).unsqueeze(-1) : torch::Tensor();
    torch::Tensor bk;                                         // β_t k_tᵀ [B, H, K, 1]
    if (beta.defined()) bk = beta.select(1, t).unsqueeze(-1).unsqueeze(-1) * k_col;
    for (auto& S : levels) {                                  // S <- exp(g) (I − β kᵀk) S
      if (!S.defined()) continue;
      if (a_t.defined()) S = S * a_t;
      if (bk.defined()) S = S - bk * torch::matmul(k_t.unsqueeze(-2), S);
    }
    auto write = (bk.defined() ? bk : k_col) * v.select(1, t).unsqueeze(-2);  // [B, H, K, V]
    levels[0] = levels[0].defined() ? levels[0] + write : write;
    auto q_row = q.select(1, t).unsqueeze(-2);                // [B, H, 1, K]
    auto lam = level_weights.select(1, t);                    // [B, H, NL]
    torch::Tensor o;
    for (int64_t l = 0; l < NL; ++l) {
      if (!levels[l].defined()) continue;
      auto r = torch::matmul(q_row, levels[l]).squeeze(-2) * lam.select(-1, l).unsqueeze(-1);  // [B, H, V]
      o = o.defined() ? o + r : r;
    }
    outs.push_back(o);
    carry(levels, p0 + t + 1);
  }
  return torch::stack(outs, 1);  // [B, T, H, V]
}

std::vector<torch::Tensor> unstack(const torch::Tensor& state, int64_t NL) {
  if (!state.defined()) return std::vector<torch::Tensor>(NL);
  return state.unbind(2);
}

torch::Tensor stack(const std::vector<torch::Tensor>& levels, const torch::TensorOptions& opts,
                    const std::vector<int64_t>& level_shape) {
  std::vector<torch::Tensor> full;
  full.reserve(levels.size());
  for (const auto& S : levels) full.push_back(S.defined() ? S : torch::zeros(level_shape, opts));
  return torch::stack(full, 2);
}

}  // namespace log_linear_detail

int64_t log_linear_num_levels(int64_t length) {
  int64_t bits = 0;
  for (int64_t x = std::max<int64_t>(length - 1, 0); x > 0; x >>= 1) ++bits;
  return bits + 1;
}

void check_log_linear_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& level_weights,
                             const torch::Tensor& initial_state, int64_t start) {
  using log_linear_detail::shape_str;
  const std::string op = "log_linear_gdn";
  if (!q.defined() || !k.defined() || !v.defined() || !level_weights.defined())
    throw Error(op + ": q, k, v and level_weights are required");
  if (q.dim() != 4) throw Error(op + ": q must be [B, T, H, K], got " + shape_str(q));
  if (k.sizes() != q.sizes()) throw Error(op + ": k must have q's shape " + shape_str(q) + ", got " + shape_str(k));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  if (v.dim() != 4 || v.size(0) != B || v.size(1) != T || v.size(2) != H)
    throw Error(op + ": v must be [B, T, H, V] with B, T, H of q " + shape_str(q) + ", got " + shape_str(v));
  const std::vector<int64_t> bth = {B, T, H};
  if (beta.defined() && beta.sizes() != torch::IntArrayRef(bth))
    throw Error(op + ": beta must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) + ", got " + shape_str(beta));
  if (g.defined() && g.sizes() != torch::IntArrayRef(bth))
    throw Error(op + ": g must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) + ", got " + shape_str(g));
  if (level_weights.dim() != 4 || level_weights.size(0) != B || level_weights.size(1) != T ||
      level_weights.size(2) != H || level_weights.size(3) < 1)
    throw Error(op + ": level_weights must be [B, T, H, NL] with NL >= 1 and B, T, H of q " + shape_str(q) +
                ", got " + shape_str(level_weights));
  const int64_t NL = level_weights.size(3);
  const std::vector<int64_t> state = {B, H, NL, K, v.size(3)};
  if (initial_state.defined() && initial_state.sizes() != torch::IntArrayRef(state))
    throw Error(op + ": initial_state must be [B, H, NL, K, V] = " + c10::str(torch::IntArrayRef(state)) + ", got " +
                shape_str(initial_state));
  if (start < 0) throw Error(op + ": start must be >= 0, got " + std::to_string(start));
}

LogLinearResult log_linear_gdn_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& beta, const torch::Tensor& g,
                                         const torch::Tensor& level_weights, const torch::Tensor& initial_state,
                                         int64_t start, double scale) {
  check_log_linear_inputs(q, k, v, beta, g, level_weights, initial_state, start);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, level_weights, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t NL = level_weights.size(3);
  const auto opts = q.options().dtype(dt);
  auto levels = log_linear_detail::unstack(initial_state.defined() ? initial_state.to(dt) : torch::Tensor(), NL);
  torch::Tensor o = T == 0 ? torch::zeros({B, 0, H, V}, opts)
                           : log_linear_detail::steps(q.to(dt) * scale, k.to(dt),
                                                      v.to(dt), beta.defined() ? beta.to(dt) : torch::Tensor(),
                                                      g.defined() ? g.to(dt).exp() : torch::Tensor(),
                                                      level_weights.to(dt), levels, start);
  return {o.to(v.scalar_type()), log_linear_detail::stack(levels, opts, {B, H, K, V})};
}

LogLinearResult log_linear_gdn_static_step(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& beta, const torch::Tensor& g,
                                           const torch::Tensor& level_weights, const torch::Tensor& state,
                                           const torch::Tensor& position, double scale) {
  check_log_linear_inputs(q, k, v, beta, g, level_weights, state, 0);
  if (q.size(1) != 1) throw Error("log_linear_gdn: the static decode step takes one token, got T " + std::to_string(q.size(1)));
  if (!state.defined()) throw Error("log_linear_gdn: the static decode step needs the level states");
  if (!position.defined() || position.numel() != 1 || position.scalar_type() != torch::kLong)
    throw Error("log_linear_gdn: the static decode step needs the position as one int64 value");
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, level_weights, state});
  const int64_t B = q.size(0), H = q.size(2), NL = level_weights.size(3);
  auto S = state.to(dt);                                        // [B, H, NL, K, V]
  auto k_row = k.select(1, 0).to(dt).unsqueeze(2).unsqueeze(2);  // [B, H, 1, 1, K]
  auto k_col = k_row.transpose(-1, -2);                          // [B, H, 1, K, 1]
  if (g.defined()) S = S * g.select(1, 0).to(dt).exp().view({B, H, 1, 1, 1});
  auto written = k_col;
  if (beta.defined()) {  // S ← (I − β kᵀk) S for every level
    written = beta.select(1, 0).to(dt).view({B, H, 1, 1, 1}) * k_col;
    S = S - written * torch::matmul(k_row, S);
  }
  auto levels = torch::arange(NL, position.options());  // [NL]
  auto at_level = [&](const torch::Tensor& mask) { return mask.to(dt).view({1, 1, NL, 1, 1}); };
  S = S + at_level(levels == 0) * (written * v.select(1, 0).to(dt).unsqueeze(2).unsqueeze(2));  // level 0 += β kᵀ v
  auto q_row = (q.select(1, 0).to(dt) * scale).unsqueeze(2).unsqueeze(2);                        // [B, H, 1, 1, K]
  auto reads = torch::matmul(q_row, S).squeeze(-2);                                              // [B, H, NL, V]
  auto o = (reads * level_weights.select(1, 0).to(dt).unsqueeze(-1)).sum(2).unsqueeze(1);        // [B, 1, H, V]
  if (NL > 1) {
    // The carry before position p + 1: levels ℓ <= ctz(p + 1) (those 2^ℓ divides) merge into min(ctz + 1, NL − 1).
    auto next = position.reshape({1}) + 1;
    auto divides = torch::bitwise_and(next, torch::pow(2, levels) - 1) == 0;  // [NL], ℓ <= ctz(p + 1)
    auto target = divides.narrow(0, 1, NL - 1).sum() + 1;                        // min(ctz + 1, NL − 1)
    target = torch::clamp_max(target, NL - 1);
    auto is_target = levels == target;
    auto merged = divides.logical_or(is_target);
    S = S * at_level(merged.logical_not()) + at_level(is_target) * (S * at_level(merged)).sum(2, true);
  }
  return {o.to(v.scalar_type()), S};
}

}  // namespace mnemo
