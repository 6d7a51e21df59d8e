// The Continuum Memory System (arXiv 2512.24695 §3, Eqs. 30–31; docs/models.md#continuum-memory-system) as a block's
// feed-forward part: a chain of residual MLP memories M_1 … M_K, level ℓ updated in context every C_ℓ tokens
// (runtime/hope/hope.h cms_level_*). Level ℓ's self-supervised target and step size come from its own input x:
//   v_t = x_t W_v^ℓ,   η_t = lr · σ(x_t w_η^ℓ + b_η^ℓ)
// A block with block_ffn "cms" computes h + (M_K(…M_1(n)) − n) with n = RMSNorm(h): the chain's change of its input
// is the residual branch, as SwiGLU's output is.
// Decode state (in the block's LayerState): "cms<ℓ>.w1", "cms<ℓ>.w2", "cms<ℓ>.p1", "cms<ℓ>.p2" per level with C_ℓ > 0.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/mixer.h"

namespace mnemo {

struct CmsOptions {
  int64_t d_model = 0;
  std::vector<int64_t> chunk_sizes;  // one level each, fastest first; 0 = a level that never changes in context
  double hidden_ratio = 1.0;         // h = round(d_model · hidden_ratio) per level
  double lr = 0.1;                   // the inner step's scale
};

struct ContinuumMemoryImpl : torch::nn::Module {
  explicit ContinuumMemoryImpl(const CmsOptions& options);
  // n [B, T, d] -> M_K(…M_1(n)) − n. With a state: continue from it (offset state->pos) and leave the new one there.
  torch::Tensor forward(const torch::Tensor& n, LayerState* state);
  CmsOptions options;
  int64_t hidden = 0;
  std::vector<torch::Tensor> w1, w2;         // θ^0 of each level: [h, d], [d, h]
  std::vector<torch::nn::Linear> target, rate;  // W_v^ℓ (d -> d), (w_η^ℓ, b_η^ℓ) (d -> 1)
};
TORCH_MODULE(ContinuumMemory);

// Checks of the model keys that configure it (mnemo::Error naming the key and value).
void check_cms_options(const CmsOptions& options);

}  // namespace mnemo
