// RWKV's channel mix (arXiv 2503.14456 §4.3, "ReLU² channel mixing"; flash-linear-attention's RWKV7FeedForward) as a
// block's feed-forward part (block_ffn "rwkv_channel_mix", docs/models.md#rwkv-7). With x_{-1} the previous token's
// input (0 before the first) and μ_k a learned per-channel interpolation:
//   k = x + (x_{-1} − x) ⊙ μ_k,   out = W_value ReLU(W_key k)²
// W_key [I, d], W_value [d, I], I = channel_mix_hidden_size(d, mlp_ratio). Decode state (in the block's LayerState):
// "channel_mix.shift" [B, d], the last input.
#pragma once
#include <torch/torch.h>

#include "runtime/mixer.h"

namespace mnemo {

// I = 32 · ceil(floor(d · ratio) / 32), as flash-linear-attention's RWKV7FeedForward sizes it.
int64_t channel_mix_hidden_size(int64_t d_model, double ratio);

struct RwkvChannelMixImpl : torch::nn::Module {
  // layer_index / n_layers set μ_k's initialisation: 1 − (n/d)^{(1 − l/L)^4} over the channels n.
  RwkvChannelMixImpl(int64_t d_model, double ratio, int64_t layer_index, int64_t n_layers);
  // x [B, T, d] -> [B, T, d]. With a state: the token shift continues from it and the last input is left there.
  torch::Tensor forward(const torch::Tensor& x, LayerState* state);
  torch::Tensor x_k;
  torch::nn::Linear key{nullptr}, value{nullptr};
};
TORCH_MODULE(RwkvChannelMix);

}  // namespace mnemo
