// Pieces of the standard recurrent-memory mixer template (docs/models.md#shared-building-blocks) shared by the
// linear-recurrent and deep-memory families:
//   q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = SiLU(Conv4(x W_v))   (per head)
//   out = W_o concat_h( RMSNorm(y_h) * w * SiLU((x W_g)_h) )
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/layers.h"
#include "runtime/mixer.h"

namespace mnemo {

struct HeadProjectionOptions {
  int64_t d_model = 0, n_heads = 0, head_dim = 0;
  bool short_conv = true;  // depthwise causal conv (kernel conv_size) + SiLU
  int64_t conv_size = 4;
  bool silu = true;         // SiLU after the projection when there is no conv
  bool l2_normalize = false;
};

// The docs/models.md#shared-building-blocks template's q/k/v projection: SiLU after the (optional) short conv, l2norm for q and k.
inline HeadProjectionOptions template_projection(int64_t d_model, int64_t n_heads, int64_t head_dim, bool short_conv,
                                                 int64_t conv_size, bool l2_normalize) {
  HeadProjectionOptions p;
  p.d_model = d_model;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.short_conv = short_conv;
  p.conv_size = conv_size;
  p.silu = true;
  p.l2_normalize = l2_normalize;
  return p;
}

// x [B, T, D] -> [B, T, H, head_dim]; with a state, the conv cache is kept under `name`.
struct HeadProjectionImpl : torch::nn::Module {
  HeadProjectionImpl(const HeadProjectionOptions& o, const std::string& name);
  torch::Tensor forward(const torch::Tensor& x, LayerState* state);
  // The same with the conv cache under `key`; detach = false keeps that cache differentiable (the tail of
  // [cache | proj(x)]), so that a later call's gradient reaches this one (the Titans/ATLAS MAC segments).
  torch::Tensor forward_keyed(const torch::Tensor& x, LayerState* state, const std::string& key, bool detach);
  // Packed sequences, x [1, N, D] -> [1, N, H, d] (the short conv restarts at every sequence).
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs);
  HeadProjectionOptions opt;
  std::string name;
  torch::nn::Linear proj{nullptr};
  ShortConv conv{nullptr};
};
TORCH_MODULE(HeadProjection);

// y [B, T, H, Dv], x [B, T, D] -> out [B, T, D]: per-head gated RMSNorm with g = x W_g, then W_o.
struct GatedOutputImpl : torch::nn::Module {
  GatedOutputImpl(int64_t d_model, int64_t n_heads, int64_t head_dim_v, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& y, const torch::Tensor& x);
  int64_t n_heads, head_dim_v;
  torch::nn::Linear gate_proj{nullptr}, out_proj{nullptr};
  GatedRMSNorm norm{nullptr};
};
TORCH_MODULE(GatedOutput);

// Mamba2/GDN decay init (docs/models.md#shared-building-blocks): A ~ U(lo, hi), A_log = log A;
// dt = exp(U(log 1e-3, log 1e-1)) clamped >= 1e-4, dt_bias = dt + log(-expm1(-dt)).
torch::Tensor init_a_log(int64_t n_heads, double lo, double hi);
torch::Tensor init_dt_bias(int64_t n, double dt_min = 1e-3, double dt_max = 1e-1, double floor = 1e-4);

}  // namespace mnemo
