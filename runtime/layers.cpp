#include "runtime/layers.h"

#include <cmath>

namespace mnemo {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  torch::nn::Linear lin(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard g;
  lin->weight.normal_(0.0, 0.02);
  if (bias) lin->bias.zero_();
  return lin;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // fp32 statistics for half/bf16 inputs; fp64 stays fp64 (equivalence tests).
  auto xf = x.scalar_type() == torch::kFloat64 ? x : x.to(torch::kFloat32);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (y * weight).to(x.scalar_type());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps); }

int64_t swiglu_hidden_size(int64_t d_model, double ratio) {
  int64_t base = static_cast<int64_t>(std::floor(d_model * ratio * 2.0 / 3.0));
  return 256 * ((base + 255) / 256);
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t hidden) {
  gate = register_module("gate", make_linear(d_model, hidden));
  up = register_module("up", make_linear(d_model, hidden));
  down = register_module("down", make_linear(hidden, d_model));
}
torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) {
  return down(torch::silu(gate(x)) * up(x));
}

ShortConvImpl::ShortConvImpl(int64_t channels_, int64_t kernel_, bool silu_)
    : channels(channels_), kernel(kernel_), silu(silu_) {
  // PyTorch's Conv1d default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = K for depthwise.
  double bound = 1.0 / std::sqrt(static_cast<double>(kernel));
  weight = register_parameter("weight", torch::empty({channels, 1, kernel}).uniform_(-bound, bound));
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& x, LayerState* state,
                                     const std::string& cache_key) {
  // Causal depthwise conv, y_t = Σ_{j<K} w_j ⊙ x_{t-K+1+j} (cross-correlation over the K-1 cached
  // inputs and x), computed as K shifted multiply-adds in the [B, T, C] layout: on CPU this is
  // several times faster than a grouped conv1d and avoids two transposes. Cache layout [B, C, K-1].
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor prev;  // [B, K-1, C]
  if (state && state->has(cache_key)) {
    prev = state->at(cache_key).to(x.scalar_type()).transpose(1, 2);
  } else {
    prev = torch::zeros({B, kernel - 1, channels}, x.options());
  }
  auto full = torch::cat({prev, x}, 1);       // [B, K-1+T, C]
  auto w = weight.to(x.scalar_type()).squeeze(1);  // [C, K]
  auto y = full.narrow(1, 0, T) * w.select(1, 0);
  for (int64_t j = 1; j < kernel; ++j) y = y + full.narrow(1, j, T) * w.select(1, j);
  if (state) state->tensors[cache_key] = full.narrow(1, T, kernel - 1).transpose(1, 2).contiguous().detach();
  return silu ? torch::silu(y) : y;
}

GatedRMSNormImpl::GatedRMSNormImpl(int64_t head_dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({head_dim}));
}
torch::Tensor GatedRMSNormImpl::forward(const torch::Tensor& y, const torch::Tensor& g) {
  return rms_norm(y, weight, eps) * torch::silu(g);
}

torch::Tensor l2norm(const torch::Tensor& x, double eps) {
  return x * torch::rsqrt(x.pow(2).sum(-1, true) + eps);
}

torch::Tensor apply_rope(const torch::Tensor& x, int64_t offset, double theta) {
  const int64_t T = x.size(2), D = x.size(3), half = D / 2;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  auto inv_freq = torch::pow(theta, -torch::arange(0, half, opts) * 2.0 / static_cast<double>(D));
  auto pos = torch::arange(offset, offset + T, opts);
  auto ang = torch::outer(pos, inv_freq);  // [T, half]
  auto cos = torch::cat({ang.cos(), ang.cos()}, -1).to(x.scalar_type());
  auto sin = torch::cat({ang.sin(), ang.sin()}, -1).to(x.scalar_type());
  auto x1 = x.slice(-1, 0, half), x2 = x.slice(-1, half, D);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

}  // namespace mnemo
