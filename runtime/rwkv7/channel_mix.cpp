// RWKV's channel mix (runtime/rwkv7/channel_mix.h).
#include "runtime/rwkv7/channel_mix.h"

#include <cmath>

#include "runtime/layers.h"

namespace mnemo {

int64_t channel_mix_hidden_size(int64_t d_model, double ratio) {
  const auto base = static_cast<int64_t>(std::floor(double(d_model) * ratio + 1e-9));
  return 32 * ((base + 31) / 32);
}

RwkvChannelMixImpl::RwkvChannelMixImpl(int64_t d_model, double ratio, int64_t layer_index, int64_t n_layers) {
  const int64_t hidden = channel_mix_hidden_size(d_model, ratio);
  if (hidden < 1) throw Error("block_ffn rwkv_channel_mix: mlp_ratio " + std::to_string(ratio) + " gives no hidden units");
  const double depth = 1.0 - double(layer_index) / double(std::max<int64_t>(n_layers, 1));
  auto channel = torch::arange(d_model, torch::kFloat32) / double(d_model);
  x_k = register_parameter("x_k", 1.0 - channel.pow(std::pow(depth, 4.0)));
  // RWKV starts W_key orthogonal and W_value at zero; here both start normal(0, 0.02) (make_linear), so every
  // parameter has a gradient from the first step (docs/models.md#rwkv-7).
  key = register_module("key", make_linear(d_model, hidden));
  value = register_module("value", make_linear(hidden, d_model));
}

torch::Tensor RwkvChannelMixImpl::forward(const torch::Tensor& x, LayerState* state) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  torch::Tensor prev;
  if (state && state->has("channel_mix.shift")) prev = state->at("channel_mix.shift").to(x.scalar_type());
  else prev = torch::zeros({B, D}, x.options());
  auto shifted = torch::cat({prev.unsqueeze(1), x.narrow(1, 0, T - 1)}, 1);
  if (state) state->tensors["channel_mix.shift"] = x.select(1, T - 1).detach();
  auto k = torch::addcmul(x, shifted - x, x_k);
  return value(torch::relu(key(k)).square());
}

}  // namespace mnemo
