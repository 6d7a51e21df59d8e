// DT / SWDT kernel: blocked attention with decay-window weights (see kernel_memory.h;
// docs/models.md#deeptransformers-swdt-and-dot, docs/models.md#numerical-stability). DOT's kernels are naive.cpp
// and chunk.cpp.
#include <limits>
#include <vector>

#include "core/common.h"
#include "runtime/deep_transformer/kernel_memory.h"
#include "runtime/deep_transformer/prepare.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

KernelAttnResult kernel_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                                  const torch::Tensor& s, const KernelAttnCache& cache, int64_t c, bool row_max,
                                  int64_t query_block) {
  using deep_transformer_detail::bh, deep_transformer_detail::cat_or, deep_transformer_detail::check;
  check(q, k, v, log_alpha, s, c);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(v);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2);
  const int64_t Nc = cache.k.defined() ? cache.k.size(2) : 0;
  auto Q = bh(q, dt), Kn = bh(k, dt), Vn = bh(v, dt);
  auto b = bh(log_alpha, dt).cumsum(2);  // b_t = Σ_{r<=t} log α_r  [B, H, T]
  auto et = bh(eta, dt);
  auto gn = gamma.defined() ? bh(gamma, dt) : torch::ones({B, H, T}, Q.options());
  auto K = cat_or(Nc ? cache.k.to(dt) : torch::Tensor(), Kn), V = cat_or(Nc ? cache.v.to(dt) : torch::Tensor(), Vn);
  auto G = cat_or(Nc ? cache.g.to(dt) : torch::Tensor(), gn);
  const int64_t N = Nc + T;
  // key positions relative to this call: cached tokens are -Nc..-1, new tokens 0..T-1
  auto kpos = torch::arange(-Nc, T, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
  auto base = Nc ? torch::cat({cache.w.to(dt), torch::zeros({B, H, T}, Q.options())}, 2) : torch::Tensor();
  // Per offset o: n = pos_i + o, coefficient γ_i η_n, cumulative log decay b_n (gathered; masked below).
  std::vector<torch::Tensor> coef, bn, npos;
  for (int64_t o = 0; o < c; ++o) {
    auto n = kpos + o;
    auto valid = (n >= 0) & (n < T);
    auto idx = n.clamp(0, std::max<int64_t>(T - 1, 0));
    auto e = et.index_select(2, idx), bb = b.index_select(2, idx);
    coef.push_back(torch::where(valid, G * e, torch::zeros({}, Q.options())));
    bn.push_back(bb);
    npos.push_back(n);
  }
  auto sc = s.to(dt).view({1, H, 1, 1});
  std::vector<torch::Tensor> ys;
  torch::Tensor w_last;
  for (int64_t t0 = 0; t0 < T; t0 += query_block) {
    const int64_t L = std::min(query_block, T - t0);
    auto tpos = torch::arange(t0, t0 + L, kpos.options()).view({L, 1});
    auto bt = b.narrow(2, t0, L).unsqueeze(-1);  // [B, H, L, 1]
    auto w = base.defined() ? base.unsqueeze(2) * bt.exp() : torch::zeros({B, H, L, N}, Q.options());
    for (int64_t o = 0; o < c; ++o) {
      auto on = (npos[o].view({1, N}) <= tpos);  // n <= t (n >= 0 folded into coef)
      auto d = (bt - bn[o].unsqueeze(2)).clamp_max(0);  // b_t - b_n <= 0 (masked before exp, docs/models.md#numerical-stability)
      w = w + torch::where(on, coef[o].unsqueeze(2) * d.exp(), torch::zeros({}, Q.options()));
    }
    auto causal = kpos.view({1, N}) <= tpos;  // [L, N]
    auto logits = sc * torch::matmul(Q.narrow(2, t0, L), K.transpose(-1, -2));  // s q̂·k̂
    logits = logits.masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
    if (row_max) logits = logits - std::get<0>(logits.max(-1, true));
    ys.push_back(torch::matmul(w * logits.exp(), V));
    if (t0 + L == T) w_last = w.select(2, L - 1);
  }
  KernelAttnResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({B, 0, H, v.size(3)}, v.options());
  r.cache = T ? KernelAttnCache{K, V, w_last, G} : cache;
  return r;
}

}  // namespace mnemo
