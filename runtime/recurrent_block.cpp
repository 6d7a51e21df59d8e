#include "runtime/recurrent_block.h"
#include "runtime/packed_sequences.h"

#include <cmath>

namespace mnemo {

HeadProjectionImpl::HeadProjectionImpl(const HeadProjectionOptions& o, const std::string& name_)
    : opt(o), name(name_) {
  proj = register_module("proj", make_linear(o.d_model, o.n_heads * o.head_dim));
  if (o.short_conv) conv = register_module("conv", ShortConv(o.n_heads * o.head_dim, o.conv_size, true));
}

torch::Tensor HeadProjectionImpl::forward(const torch::Tensor& x, LayerState* state) {
  return forward_keyed(x, state, "conv_" + name, /*detach=*/true);
}

torch::Tensor HeadProjectionImpl::forward_keyed(const torch::Tensor& x, LayerState* state, const std::string& key,
                                                bool detach) {
  const int64_t B = x.size(0), T = x.size(1);
  auto y = proj(x);
  if (opt.short_conv) {
    torch::Tensor prev;  // the cache before this call, [B, C, K-1]
    if (state && state->has(key)) prev = state->at(key);
    auto out = conv(y, state, key);  // stores a detached cache
    if (state && !detach) {          // replace it by the differentiable tail of [prev | y]
      const int64_t K = conv->kernel;
      auto before = prev.defined() ? prev.to(y.scalar_type()).transpose(1, 2)
                                   : torch::zeros({B, K - 1, y.size(2)}, y.options());
      state->tensors[key] = torch::cat({before, y}, 1).narrow(1, T, K - 1).transpose(1, 2).contiguous();
    }
    y = out;
  } else if (opt.silu) {
    y = torch::silu(y);
  }
  y = y.view({B, T, opt.n_heads, opt.head_dim});
  return opt.l2_normalize ? l2norm(y) : y;
}

torch::Tensor HeadProjectionImpl::forward_packed(const torch::Tensor& x, const PackedSequences& seqs) {
  auto y = proj(x);
  if (opt.short_conv) y = conv->forward_packed(y, seqs);
  else if (opt.silu) y = torch::silu(y);
  y = y.view({1, x.size(1), opt.n_heads, opt.head_dim});
  return opt.l2_normalize ? l2norm(y) : y;
}

GatedOutputImpl::GatedOutputImpl(int64_t d_model, int64_t n_heads_, int64_t head_dim_v_, double eps)
    : n_heads(n_heads_), head_dim_v(head_dim_v_) {
  gate_proj = register_module("gate_proj", make_linear(d_model, n_heads * head_dim_v));
  out_proj = register_module("out_proj", make_linear(n_heads * head_dim_v, d_model));
  norm = register_module("norm", GatedRMSNorm(head_dim_v, eps));
}

torch::Tensor GatedOutputImpl::forward(const torch::Tensor& y, const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  auto g = gate_proj(x).view({B, T, n_heads, head_dim_v});
  auto o = norm(y.to(x.scalar_type()), g);
  return out_proj(o.reshape({B, T, n_heads * head_dim_v}));
}

torch::Tensor init_a_log(int64_t n_heads, double lo, double hi) {
  return torch::empty({n_heads}).uniform_(lo, hi).log();
}

torch::Tensor init_dt_bias(int64_t n, double dt_min, double dt_max, double floor) {
  auto dt = torch::exp(torch::rand({n}) * (std::log(dt_max) - std::log(dt_min)) + std::log(dt_min));
  dt = dt.clamp_min(floor);
  return dt + torch::log(-torch::expm1(-dt));  // inverse softplus
}

}  // namespace mnemo
