// Chunked PaTH attention (docs/models.md#path-attention; the UT form of each chunk's Householder product, see
// runtime/path_attn/path_attn.h): query chunks in order; each attends to the key cache moved to its start (queries
// transformed back to the chunk start) and to its own keys through the intra-chunk logits, then moves the cache
// across the chunk and appends its keys moved to the chunk end.
#include <limits>
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/path_attn/path_attn.h"

namespace mnemo {

PathAttnResult path_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                              const torch::Tensor& c_k, double scale, int64_t chunk_size) {
  check_path_attention_inputs(q, k, v, w, beta, c_q, c_k);
  if (chunk_size < 1) throw Error("path_attn: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  const AutocastOff autocast_off;
  const auto dt = recurrence_dtype({q, k, v, w, beta});
  const auto [Q, K, V, W, Bt, Cq, Ck, B, Tq, HQ, D, H, G, Tk, Dv, offset] =
      path_attention_heads(q, k, v, w, beta, c_q, c_k, dt);
  if (Tq == 0) return {torch::zeros({B, 0, HQ, Dv}, v.options()), k};
  const bool gated = c_q.defined();
  auto opts = q.options().dtype(dt);
  auto cache = K.narrow(2, 0, offset);  // keys moved to the current chunk's start
  std::vector<torch::Tensor> outs;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < Tq; s += chunk_size) {
    const int64_t n = std::min(chunk_size, Tq - s), start = offset + s;
    auto Wc = W.narrow(2, s, n), bW = Bt.narrow(2, s, n).unsqueeze(-1) * Wc;  // [B, H, n, D]
    auto Kn = K.narrow(2, start, n);
    auto Wt = Wc.transpose(-1, -2);
    auto eye = torch::eye(n, opts);
    auto A = torch::linalg_solve_triangular(eye + torch::matmul(bW, Wt).tril(-1), eye, /*upper=*/false,
                                            /*left=*/true, /*unitriangular=*/true);           // (I + L)⁻¹
    auto Y = torch::matmul(A, bW);                                                             // [B, H, n, D]
    auto alpha = torch::matmul(A, torch::matmul(bW, Kn.transpose(-1, -2)).tril(-1));          // [B, H, n, n]
    // The G query heads of a key head as G·n rows of 4-d batched products (no broadcast copies of the cache).
    auto Qc = Q.narrow(3, s, n).reshape({B, H, G * n, D});
    auto QW = torch::matmul(Qc, Wt).view({B, H, G, n, n}).tril().view({B, H, G * n, n});
    auto intra = (torch::matmul(Qc, Kn.transpose(-1, -2)) - torch::matmul(QW, alpha)).view({B, H, G, n, n});
    auto upper = torch::ones({n, n}, opts.dtype(torch::kBool)).triu(1);
    intra = intra.masked_fill(upper, neg_inf);
    torch::Tensor logits = intra;                                                              // [B, H, G, n, ·]
    if (start > 0) {
      auto Qs = Qc - torch::matmul(QW, Y);  // queries seen from the chunk start
      logits = torch::cat({torch::matmul(Qs, cache.transpose(-1, -2)).view({B, H, G, n, start}), intra}, -1);
    }
    if (gated) logits = logits + Cq.narrow(3, s, n).unsqueeze(-1) - Ck.narrow(3, 0, start + n).unsqueeze(-2);
    auto p = torch::softmax(logits * scale, -1).view({B, H, G * n, start + n});
    outs.push_back(torch::matmul(p, V.narrow(2, 0, start + n)).view({B, H, G, n, Dv}));
    auto moved = Kn - torch::matmul(alpha.transpose(-1, -2), Wc);                             // own keys to chunk end
    if (start > 0) {
      // K ← K (I − Yᵀ W): through the D×D matrix when it is cheaper than the rank-n update (D < 2n).
      auto across = D < 2 * n ? torch::matmul(cache, torch::eye(D, opts) - torch::matmul(Y.transpose(-1, -2), Wc))
                              : cache - torch::matmul(torch::matmul(cache, Y.transpose(-1, -2)), Wc);
      cache = torch::cat({across, moved}, 2);
    } else {
      cache = moved;
    }
  }
  auto o = torch::cat(outs, 3).reshape({B, HQ, Tq, Dv}).transpose(1, 2);
  return {o.to(v.scalar_type()), cache.transpose(1, 2).to(k.scalar_type())};
}

}  // namespace mnemo
