#include "runtime/blocks/window_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "runtime/attention/attention.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace {

// The common training case (MAG over a fresh sequence: prefix keys 0..N_p-1 then the tokens, queries
// the tokens) is causal attention between two contiguous position ranges. When, in addition, the window
// hides no key or there is no always-visible prefix to keep, it is exactly the fused CPU kernel's
// visibility (key k_offset + j visible to query q_offset + i iff k <= q and, with window > 0, k > q - W).
// Returns the fused kernel's arguments, or nothing when the positions need the general mask.
struct FusedLayout {
  int64_t q_offset, k_offset, window;
};
std::optional<FusedLayout> fused_layout(const torch::Tensor& qpos, const torch::Tensor& kpos, int64_t window,
                                        int64_t always_before) {
  const int64_t Tq = qpos.size(0), Tk = kpos.size(0);
  if (Tq == 0 || Tk == 0) return std::nullopt;
  const auto io = qpos.options();
  const int64_t q0 = qpos[0].item<int64_t>(), k0 = kpos[0].item<int64_t>();
  if (!torch::equal(qpos, torch::arange(q0, q0 + Tq, io)) || !torch::equal(kpos, torch::arange(k0, k0 + Tk, io)))
    return std::nullopt;
  if (window <= 0) return FusedLayout{q0, k0, 0};
  const int64_t first_windowed = std::max(k0, always_before);  // the oldest key the window can hide
  if (first_windowed > q0 + Tq - 1 - window) return FusedLayout{q0, k0, 0};  // even the last query sees it
  if (k0 >= always_before) return FusedLayout{q0, k0, window};                // no prefix: the kernel's own window
  return std::nullopt;
}

}  // namespace

torch::Tensor window_attention(const torch::Tensor& q, const torch::Tensor& qpos, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& kpos, int64_t window,
                               int64_t always_before, int64_t q_block) {
  const int64_t Tq = q.size(2), D = q.size(3);
  if (fused_cpu_eligible({q, k, v})) {
    if (const auto f = fused_layout(qpos, kpos, window, always_before))
      return blocked_attention(q, k, v, f->q_offset, f->k_offset, f->window, q_block);
  }
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(q);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto kc = k.to(dt), vc = v.to(dt);
  const int64_t n_pre = window > 0 ? (kpos < always_before).sum().item<int64_t>() : 0;
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < Tq; s += std::max<int64_t>(1, q_block)) {
    const int64_t e = std::min(Tq, s + std::max<int64_t>(1, q_block));
    auto qb = q.narrow(2, s, e - s).to(dt);
    auto qp = qpos.narrow(0, s, e - s);
    auto kb = kc, vb = vc, kp = kpos;
    if (window > 0) {  // kpos ascending: the always-visible prefix plus the keys in (min q - W, max q]
      const int64_t qlo = qp.min().item<int64_t>(), qhi = qp.max().item<int64_t>();
      const int64_t lo = std::max(n_pre, (kpos <= qlo - window).sum().item<int64_t>());
      const int64_t hi = std::max(lo, (kpos <= qhi).sum().item<int64_t>());
      auto idx = torch::cat({torch::arange(0, n_pre, torch::kInt64), torch::arange(lo, hi, torch::kInt64)})
                     .to(kpos.device());
      kb = kc.index_select(2, idx);
      vb = vc.index_select(2, idx);
      kp = kpos.index_select(0, idx);
    }
    auto qcol = qp.unsqueeze(1), krow = kp.unsqueeze(0);
    auto vis = krow <= qcol;
    if (window > 0) vis = vis & ((krow > qcol - window) | (krow < always_before));
    auto logits = torch::matmul(qb, kb.transpose(-1, -2)) * scale;
    logits = logits.masked_fill(vis.logical_not(), -std::numeric_limits<double>::infinity());
    outs.push_back(torch::matmul(torch::softmax(logits, -1), vb));
  }
  auto out = Tq > 0 ? torch::cat(outs, 2) : torch::zeros({q.size(0), q.size(1), 0, v.size(3)}, q.options());
  return out.to(q.scalar_type());
}

torch::Tensor segment_attention(const torch::Tensor& q, int64_t so, const torch::Tensor& pk, const torch::Tensor& pv,
                                const torch::Tensor& hk, const torch::Tensor& hv, const torch::Tensor& xk,
                                const torch::Tensor& xv, int64_t q_block) {
  const int64_t n = q.size(2), m = hk.size(2), n_p = pk.defined() ? pk.size(2) : 0;
  if (fused_attention_pays({q, pk, pv, hk, hv, xk, xv}) &&
      fused_attention_supported(n, n_p + 2 * m, so, -n_p, 0, /*keys_per_step=*/2)) {
    auto pairs = [&](const torch::Tensor& p, const torch::Tensor& h, const torch::Tensor& x) {
      auto hx = torch::stack({h, x}, 3).reshape({h.size(0), h.size(1), 2 * m, h.size(3)});
      return n_p > 0 ? torch::cat({p, hx}, 2) : hx;
    };
    return fused_attention(q, pairs(pk, hk, xk), pairs(pv, hv, xv), so, -n_p, 0, /*keys_per_step=*/2);
  }
  auto io = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto seg_pos = torch::arange(n_p, n_p + m, io);
  std::vector<torch::Tensor> ks = {hk, xk}, vs = {hv, xv}, kp = {seg_pos, seg_pos};
  if (n_p > 0) {
    ks.insert(ks.begin(), pk);
    vs.insert(vs.begin(), pv);
    kp.insert(kp.begin(), torch::arange(0, n_p, io));
  }
  auto qpos = torch::arange(n_p + so, n_p + so + n, io);
  return window_attention(q, qpos, torch::cat(ks, 2), torch::cat(vs, 2), torch::cat(kp), 0, 0, q_block);
}

}  // namespace mnemo
