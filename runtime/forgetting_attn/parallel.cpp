// Parallel forgetting attention (docs/models.md#forgetting-transformer), blocked over queries: for a block of queries
// the logits against every key up to the block's last position, scale q k^T + c_i − c_j, masked above the diagonal,
// softmax, times V. On the CPU (fp32/fp64) the fused attention kernel computes the same with c_i − c_j as its logit
// bias (runtime/kernels/fused_cpu.h). The forget bias c_i − c_j <= 0 for visible keys: it only lowers logits, so the row max stays the
// usual stabiliser.
#include <cmath>
#include <limits>
#include <vector>

#include "core/common.h"
#include "runtime/attention/attention.h"
#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

torch::Tensor forgetting_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& c_q, const torch::Tensor& c_k, double scale,
                                   int64_t q_block) {
  check_forgetting_attention_inputs(q, k, v, c_q, c_k);
  if (q_block < 1) throw Error("forgetting_attn: q_block must be >= 1, got " + std::to_string(q_block));
  const AutocastOff autocast_off;
  const auto dt = recurrence_dtype({q, k, v, c_q, c_k});
  const int64_t B = q.size(0), Tq = q.size(1), H = q.size(2), Tk = k.size(1), offset = Tk - Tq;
  if (Tq == 0) return torch::zeros({B, 0, H, v.size(3)}, v.options());
  auto K = k.to(dt).transpose(1, 2), V = v.to(dt).transpose(1, 2);
  auto Cq = c_q.to(dt).transpose(1, 2), Ck = c_k.to(dt).transpose(1, 2);  // [B, H, T]
  // On the CPU: the fused attention kernel with the forget-gate term as its logit bias (its scale is 1/√d_h).
  const int64_t D = q.size(3);
  auto Qu = q.to(dt).transpose(1, 2);
  if (v.size(3) == D && std::abs(scale * std::sqrt(static_cast<double>(D)) - 1.0) < 1e-12 &&
      fused_attention_pays({Qu, K, V, Cq, Ck}) && fused_attention_supported(Tq, Tk, offset, 0, 0))
    return fused_attention(Qu, K, V, offset, 0, 0, 1, Cq, Ck).transpose(1, 2).to(v.scalar_type());
  auto Q = Qu * scale;  // [B, H, Tq, D]
  std::vector<torch::Tensor> outs;
  for (int64_t start = 0; start < Tq; start += q_block) {
    const int64_t n = std::min(q_block, Tq - start), visible = offset + start + n;  // keys 0 .. visible-1
    auto logits = torch::matmul(Q.narrow(2, start, n), K.narrow(2, 0, visible).transpose(-1, -2)) +
                  Cq.narrow(2, start, n).unsqueeze(-1) - Ck.narrow(2, 0, visible).unsqueeze(-2);  // [B, H, n, vis]
    // query i (block row r) sits at key position offset + start + r and sees keys j <= that position
    auto rows = torch::arange(n, q.options().dtype(torch::kLong)).unsqueeze(-1) + (offset + start);
    auto cols = torch::arange(visible, q.options().dtype(torch::kLong)).unsqueeze(0);
    logits = logits.masked_fill(cols > rows, -std::numeric_limits<double>::infinity());
    outs.push_back(torch::matmul(torch::softmax(logits, -1), V.narrow(2, 0, visible)));
  }
  return torch::cat(outs, 2).transpose(1, 2).to(v.scalar_type());  // [B, Tq, H, D]
}

}  // namespace mnemo
