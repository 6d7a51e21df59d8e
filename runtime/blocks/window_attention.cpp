#include "runtime/blocks/window_attention.h"

#include <cmath>
#include <limits>

#include "runtime/kernels/precision.h"

namespace mnemo {

torch::Tensor window_attention(const torch::Tensor& q, const torch::Tensor& qpos, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& kpos, int64_t window,
                               int64_t always_before, int64_t q_block) {
  const int64_t Tq = q.size(2), D = q.size(3);
  const AutocastOff autocast_off;  // §12 rule 1: the recurrence in fp32 under bf16 autocast
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

}  // namespace mnemo
