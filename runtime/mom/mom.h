// MoM — Mixture-of-Memories with Gated DeltaNet memories (docs/models.md#mom): router, load-balancing
// loss and the routed-stream short convolution, exposed for the tests.
#pragma once
#include <torch/torch.h>

namespace mnemo {

struct MomRouting {
  torch::Tensor p;    // softmax(z) in fp32 (fp64 for fp64 logits)  [B, T, E]
  torch::Tensor idx;  // selected memories, best first, ties to the lower index  [B, T, k]
  torch::Tensor w;    // renormalised weights of the selected memories  [B, T, k]
};
// docs/models.md#mom Eq. 3–4: p = softmax(z), top-k (stable sort: equal scores keep the lower index first), w = p_sel / Σ p_sel.
MomRouting mom_route(const torch::Tensor& logits, int64_t k);

// docs/models.md#mom Mixtral-style load balancing over the rows of one layer (unscaled):
//   E · Σ_{r,e} mean_n onehot[n, r, e] · mean_n p[n, e]   (= k for uniform routing)
torch::Tensor mom_balance_loss(const torch::Tensor& p, const torch::Tensor& idx);

// Depthwise causal conv (kernel K, no bias) + SiLU over right-padded streams: x [B, L, C] whose row b
// holds lens[b] valid tokens; prev [B, C, K-1] is the stream's cache (undefined = zeros, i.e. the
// conv resets at the start of every routed stream, docs/models.md#mom). Returns y [B, L, C] and the cache after
// the last valid token of each row.
std::pair<torch::Tensor, torch::Tensor> stream_conv(const torch::Tensor& x, const torch::Tensor& lens,
                                                    const torch::Tensor& weight, const torch::Tensor& prev);

}  // namespace mnemo
