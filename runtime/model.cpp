#include "runtime/model.h"

#include "runtime/registry.h"

namespace mnemo {

const std::vector<std::string>& model_config_keys() {
  static const std::vector<std::string> keys = {"model",    "vocab_size",     "d_model",  "n_layers",
                                                "n_heads",  "mlp_ratio",      "tie_embeddings",
                                                "norm_eps", "layers"};
  return keys;
}

ModelConfig model_config_from_json(const json& flat) {
  ModelConfig c;
  try {
    c.model = flat.value("model", c.model);
    c.vocab_size = flat.value("vocab_size", c.vocab_size);
    c.d_model = flat.value("d_model", c.d_model);
    c.n_layers = flat.value("n_layers", c.n_layers);
    c.n_heads = flat.value("n_heads", c.n_heads);
    c.mlp_ratio = flat.value("mlp_ratio", c.mlp_ratio);
    c.tie_embeddings = flat.value("tie_embeddings", c.tie_embeddings);
    c.norm_eps = flat.value("norm_eps", c.norm_eps);
    if (flat.contains("layers") && !flat["layers"].is_null())
      c.layers = flat["layers"].get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    throw Error(std::string("invalid model configuration: ") + e.what());
  }
  if (c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.vocab_size <= 1)
    throw Error("invalid model size: d_model, n_layers, n_heads must be > 0 and vocab_size > 1");
  if (c.d_model % c.n_heads != 0)
    throw Error("d_model (" + std::to_string(c.d_model) + ") must be divisible by n_heads (" +
                std::to_string(c.n_heads) + ")");
  c.mixer_args = flat;
  return c;
}

std::vector<std::string> ModelConfig::layer_mixers() const {
  std::vector<std::string> pattern = layers;
  if (pattern.empty()) pattern = Registry::instance().model(model).layer_pattern;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n_layers; ++i) out.push_back(pattern[i % pattern.size()]);
  return out;
}

BlockImpl::BlockImpl(const ModelConfig& cfg, int64_t layer_index, const std::string& name)
    : mixer_name(name) {
  const auto& family = Registry::instance().mixer(name);
  MixerContext ctx;
  ctx.d_model = cfg.d_model;
  ctx.n_heads = cfg.n_heads;
  ctx.layer_index = layer_index;
  ctx.n_layers = cfg.n_layers;
  ctx.args = family.defaults;
  for (auto it = family.defaults.begin(); it != family.defaults.end(); ++it)
    if (cfg.mixer_args.contains(it.key())) ctx.args[it.key()] = cfg.mixer_args[it.key()];
  mixer_norm = register_module("mixer_norm", RMSNorm(cfg.d_model, cfg.norm_eps));
  try {
    mixer = register_module("mixer", family.make(ctx));
  } catch (const json::exception& e) {
    throw Error("invalid arguments for mixer '" + name + "': " + e.what());
  }
  mlp_norm = register_module("mlp_norm", RMSNorm(cfg.d_model, cfg.norm_eps));
  mlp = register_module("mlp", SwiGLU(cfg.d_model, swiglu_hidden_size(cfg.d_model, cfg.mlp_ratio)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& h, LayerState* state) {
  auto x = h + mixer->forward(mixer_norm(h), state);
  return x + mlp(mlp_norm(x));
}

LanguageModelImpl::LanguageModelImpl(const ModelConfig& cfg) : cfg_(cfg) {
  embed_ = register_module("embed", torch::nn::Embedding(cfg.vocab_size, cfg.d_model));
  {
    torch::NoGradGuard g;
    embed_->weight.normal_(0.0, 0.02);
  }
  auto names = cfg.layer_mixers();
  for (int64_t i = 0; i < cfg.n_layers; ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), Block(cfg, i, names[i])));
  final_norm_ = register_module("final_norm", RMSNorm(cfg.d_model, cfg.norm_eps));
  if (!cfg.tie_embeddings) lm_head_ = register_module("lm_head", make_linear(cfg.d_model, cfg.vocab_size));
}

torch::Tensor LanguageModelImpl::forward(const torch::Tensor& ids, ModelState* state) {
  if (ids.dim() != 2) throw Error("model input must be [batch, time] token ids");
  if (state && state->size() != blocks_.size()) *state = initial_state();
  auto h = embed_(ids);
  auto dtype = embed_->weight.scalar_type();
  h = h.to(dtype);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    LayerState* ls = state ? &(*state)[i] : nullptr;
    h = blocks_[i]->forward(h, ls);
    if (ls) ls->pos += ids.size(1);
  }
  h = final_norm_(h);
  return cfg_.tie_embeddings ? torch::matmul(h, embed_->weight.t()) : lm_head_(h);
}

torch::Tensor LanguageModelImpl::aux_loss() const {
  torch::Tensor total;
  for (const auto& b : blocks_) {
    auto a = b->mixer->aux_loss();
    if (a.defined()) total = total.defined() ? total + a : a;
  }
  return total;
}

int64_t LanguageModelImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace mnemo
