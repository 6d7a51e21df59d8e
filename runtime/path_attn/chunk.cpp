// Chunked PaTH attention (docs/models.md#path-attention; the UT form of each chunk's Householder product, see
// runtime/path_attn/path_attn.h): query chunks in order; each attends to the key cache moved to its start (queries
// transformed back to the chunk start) and to its own keys through the intra-chunk logits, then moves the cache
// across the chunk and appends its keys moved to the chunk end. What needs no cache is batched over all chunks
// before the loop: 0.57 of Gated DeltaNet's training speed at T 2048 on one CPU thread, against 0.45 with them
// inside it (docs/performance.md).
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
  const double neg_inf = -std::numeric_limits<double>::infinity();
  // Every chunk's own terms at once (they need no cache): the query positions padded to N whole chunks with inert
  // rows (w = 0 and β = 0 make H = I; a padded key sits after every real query, masked; padded queries are dropped).
  const int64_t n = std::min(chunk_size, Tq), N = (Tq + n - 1) / n, pad = N * n - Tq;
  auto padded = [&](const torch::Tensor& x, int64_t dim) {
    if (pad == 0) return x;
    auto shape = x.sizes().vec();
    shape[dim] = pad;
    return torch::cat({x, torch::zeros(shape, x.options())}, dim);
  };
  auto Wc = padded(W, 2).view({B, H, N, n, D});
  auto bW = padded(Bt, 2).view({B, H, N, n}).unsqueeze(-1) * Wc;                      // [B, H, N, n, D]
  auto Kn = padded(K.narrow(2, offset, Tq), 2).view({B, H, N, n, D});
  auto Qc = padded(Q, 3).view({B, H, G, N, n, D}).permute({0, 1, 3, 2, 4, 5}).reshape({B, H, N, G * n, D});
  auto Vp = padded(V, 2);
  auto Wt = Wc.transpose(-1, -2);
  auto eye = torch::eye(n, opts);
  auto A = torch::linalg_solve_triangular(eye + torch::matmul(bW, Wt).tril(-1), eye, /*upper=*/false,
                                          /*left=*/true, /*unitriangular=*/true);             // (I + L)⁻¹
  auto Y = torch::matmul(A, bW);                                                               // [B, H, N, n, D]
  auto alpha = torch::matmul(A, torch::matmul(bW, Kn.transpose(-1, -2)).tril(-1));            // [B, H, N, n, n]
  // The G query heads of a key head as G·n rows of batched products (no broadcast copies of the cache).
  auto QW = torch::matmul(Qc, Wt).view({B, H, N, G, n, n}).tril().view({B, H, N, G * n, n});
  auto upper = torch::ones({n, n}, opts.dtype(torch::kBool)).triu(1);
  auto intra = (torch::matmul(Qc, Kn.transpose(-1, -2)) - torch::matmul(QW, alpha))
                   .view({B, H, N, G, n, n})
                   .masked_fill(upper, neg_inf);                                               // [B, H, N, G, n, n]
  auto Qs = Qc - torch::matmul(QW, Y);                            // queries seen from their chunk's start
  auto moved = Kn - torch::matmul(alpha.transpose(-1, -2), Wc);   // own keys moved to the chunk end
  // K ← K (I − Yᵀ W): through the D×D matrix when it is cheaper than the rank-n update (D < 2n).
  const bool square = D < 2 * n;
  auto across = square ? torch::eye(D, opts) - torch::matmul(Y.transpose(-1, -2), Wc) : torch::Tensor();
  auto Cq_p = gated ? padded(Cq, 3) : torch::Tensor(), Ck_p = gated ? padded(Ck, 3) : torch::Tensor();
  const auto intra_n = intra.unbind(2), Qs_n = Qs.unbind(2), moved_n = moved.unbind(2);
  const auto across_n = square ? across.unbind(2) : std::vector<torch::Tensor>();
  const auto Y_n = square ? std::vector<torch::Tensor>() : Y.unbind(2);
  const auto W_n = square ? std::vector<torch::Tensor>() : Wc.unbind(2);
  auto cache = K.narrow(2, 0, offset);  // keys moved to the current chunk's start
  std::vector<torch::Tensor> outs;
  for (int64_t m = 0; m < N; ++m) {
    const int64_t start = offset + m * n, rows = std::min(n, Tq - m * n);
    torch::Tensor logits = intra_n[m];                                                         // [B, H, G, n, ·]
    if (start > 0)
      logits = torch::cat({torch::matmul(Qs_n[m], cache.transpose(-1, -2)).view({B, H, G, n, start}), logits}, -1);
    if (gated)
      logits = logits + Cq_p.narrow(3, m * n, n).unsqueeze(-1) - Ck_p.narrow(3, 0, start + n).unsqueeze(-2);
    auto p = torch::softmax(logits * scale, -1).view({B, H, G * n, start + n});
    outs.push_back(torch::matmul(p, Vp.narrow(2, 0, start + n)).view({B, H, G, n, Dv}));
    const auto own = moved_n[m].narrow(2, 0, rows);
    if (start == 0) {
      cache = own;
    } else {
      auto moved_cache = square ? torch::matmul(cache, across_n[m])
                                : cache - torch::matmul(torch::matmul(cache, Y_n[m].transpose(-1, -2)), W_n[m]);
      cache = torch::cat({moved_cache, own}, 2);
    }
  }
  auto o = torch::cat(outs, 3).narrow(3, 0, Tq).reshape({B, HQ, Tq, Dv}).transpose(1, 2);
  return {o.to(v.scalar_type()), cache.transpose(1, 2).to(k.scalar_type())};
}

}  // namespace mnemo
