#include "runtime/mad_autoencoder.h"
#include "runtime/kernels/gelu.h"

#include <cmath>

namespace mnemo {

torch::Tensor sincos_position_table(int64_t n, int64_t dim) {
  const int64_t half = dim / 2;
  if (half < 2) throw Error("sincos position table needs dim >= 4, got " + std::to_string(dim));
  const double step = std::log(10000.0) / static_cast<double>(half - 1);
  auto freq = torch::exp(torch::arange(half, torch::kFloat64) * -step);
  auto angles = torch::arange(n, torch::kFloat64).unsqueeze(1) * freq.unsqueeze(0);
  auto table = torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
  if (dim % 2 == 1) table = torch::cat({table, torch::zeros({n, 1}, torch::kFloat64)}, 1);
  return table.to(torch::kFloat32);
}

namespace {
torch::nn::Linear mad_linear(int64_t in, int64_t out) {
  auto l = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
  torch::NoGradGuard g;
  l->weight.normal_(0.0, 0.02);
  l->bias.zero_();
  return l;
}
}  // namespace

MadAutoEncoderImpl::MadAutoEncoderImpl(const ModelConfig& cfg) : cfg_(cfg) {
  const int64_t D = cfg.d_model;
  embed_ = register_module("embed", torch::nn::Embedding(cfg.vocab_size, D));
  {
    torch::NoGradGuard g;
    embed_->weight.normal_(0.0, 0.02);
  }
  if (cfg.embed_norm) embed_norm_ = register_module("embed_norm", BlockNorm(D, cfg.norm_eps, cfg.block_norm));
  for (int64_t i = 0; i < cfg.n_layers; ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), Block(cfg, i, scratch_)));
  dec_norm1_ = register_module("dec_norm1", RMSNorm(D, cfg.norm_eps));
  dec_fc1_ = register_module("dec_fc1", mad_linear(D, D));
  dec_norm2_ = register_module("dec_norm2", RMSNorm(D, cfg.norm_eps));
  dec_fc2_ = register_module("dec_fc2", mad_linear(D, D));
  unembed_norm_ = register_module("unembed_norm", RMSNorm(D, cfg.norm_eps));
  unembed_ = register_module("unembed", mad_linear(D, cfg.vocab_size));
}

torch::Tensor MadAutoEncoderImpl::encode(const torch::Tensor& ids) {
  if (ids.dim() != 2 || ids.size(1) < 1) throw Error("autoencoder input must be [batch, time] token ids");
  auto h = embed_(ids).to(embed_->weight.scalar_type());
  if (embed_norm_) h = embed_norm_(h);
  scratch_->tensors.clear();
  for (auto& b : blocks_) h = b->forward(h, nullptr);
  scratch_->tensors.clear();
  return h.select(1, ids.size(1) - 1);
}

torch::Tensor MadAutoEncoderImpl::decode(const torch::Tensor& code, int64_t length) {
  auto pos = sincos_position_table(length, cfg_.d_model).to(code.device(), code.scalar_type());
  auto x = code.unsqueeze(1) + pos.unsqueeze(0);  // [B, T, D]
  x = gelu_safe(dec_fc1_(dec_norm1_(x)));
  x = gelu_safe(dec_fc2_(dec_norm2_(x)));
  return unembed_(unembed_norm_(x));
}

torch::Tensor MadAutoEncoderImpl::forward(const torch::Tensor& ids, ModelState* state) {
  if (state) throw Error("the MAD autoencoder (compression) has no decode state");
  return decode(encode(ids), ids.size(1));
}

torch::Tensor MadAutoEncoderImpl::aux_loss() const {
  torch::Tensor total;
  for (const auto& b : blocks_) {
    auto a = b->mixer->aux_loss();
    if (a.defined()) total = total.defined() ? total + a : a;
  }
  return total;
}

int64_t MadAutoEncoderImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace mnemo
