#include "runtime/model.h"

#include <algorithm>

#include "core/config_values.h"
#include "runtime/registry.h"

namespace mnemo {

const std::vector<std::string>& model_config_keys() {
  static const std::vector<std::string> keys = {"model",    "vocab_size",     "d_model",  "n_layers",
                                                "n_heads",  "mlp_ratio",      "tie_embeddings",
                                                "norm_eps", "layers",         "block_mlp",
                                                "block_ffn", "cms_chunk_sizes", "cms_hidden_ratio", "cms_lr",
                                                "block_norm", "embed_norm"};
  return keys;
}

CmsOptions cms_options(const ModelConfig& c) {
  CmsOptions o;
  o.d_model = c.d_model;
  o.chunk_sizes = c.cms_chunk_sizes;
  o.hidden_ratio = c.cms_hidden_ratio;
  o.lr = c.cms_lr;
  return o;
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
    c.block_mlp = flat.value("block_mlp", c.block_mlp);
    c.block_ffn = flat.value("block_ffn", c.block_ffn);
    c.cms_chunk_sizes = flat.value("cms_chunk_sizes", c.cms_chunk_sizes);
    c.cms_hidden_ratio = flat.value("cms_hidden_ratio", c.cms_hidden_ratio);
    c.cms_lr = flat.value("cms_lr", c.cms_lr);
    c.block_norm = flat.value("block_norm", c.block_norm);
    c.embed_norm = flat.value("embed_norm", c.embed_norm);
  } catch (const json::exception& e) {
    throw Error(std::string("invalid model configuration: ") + e.what());
  }
  if (c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.vocab_size <= 1)
    throw Error("invalid model size: d_model, n_layers, n_heads must be > 0 and vocab_size > 1");
  if (c.d_model % c.n_heads != 0)
    throw Error("d_model (" + std::to_string(c.d_model) + ") must be divisible by n_heads (" +
                std::to_string(c.n_heads) + ")");
  if (c.block_ffn != "swiglu" && c.block_ffn != "cms" && c.block_ffn != "rwkv_channel_mix")
    throw Error("block_ffn must be \"swiglu\", \"cms\" or \"rwkv_channel_mix\", got \"" + c.block_ffn + "\"");
  if (c.block_ffn == "rwkv_channel_mix" && !c.block_mlp)
    throw Error("block_ffn \"rwkv_channel_mix\" is the blocks' feed-forward part: it needs block_mlp true");
  check_block_norm_kind(c.block_norm);
  if (c.block_ffn == "cms") {
    if (!c.block_mlp) throw Error("block_ffn \"cms\" is the blocks' feed-forward part: it needs block_mlp true");
    check_cms_options(cms_options(c));
  }
  if (flat.contains("layers") && !flat["layers"].is_null()) c.layers = parse_layer_specs(flat["layers"]);
  c.mixer_args = flat;
  return c;
}

std::vector<LayerSpec> parse_layer_specs(const json& layers) {
  if (!layers.is_array())
    throw Error("config key 'layers' must be a list of mixer names or {\"mixer\": name, ...} objects, got " +
                json_excerpt(layers));
  auto& reg = Registry::instance();
  std::vector<LayerSpec> specs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& entry = layers[i];
    const std::string where = "layers[" + std::to_string(i) + "]";
    LayerSpec spec;
    if (entry.is_string()) {
      spec.mixer = entry.get<std::string>();
    } else if (entry.is_object() && entry.contains("mixer") && entry["mixer"].is_string()) {
      spec.mixer = entry["mixer"].get<std::string>();
    } else {
      throw Error(where + " must be a mixer name or an object with a \"mixer\" name, got " + json_excerpt(entry));
    }
    if (!reg.has_mixer(spec.mixer)) reg.mixer(spec.mixer);  // throws the list of known mixers
    const json& defaults = reg.mixer(spec.mixer).defaults;
    if (entry.is_object()) {
      for (auto it = entry.begin(); it != entry.end(); ++it) {
        if (it.key() == "mixer") continue;
        if (!defaults.contains(it.key())) {
          std::string known;
          for (auto k = defaults.begin(); k != defaults.end(); ++k) known += (known.empty() ? "" : ", ") + k.key();
          throw Error(where + ": mixer '" + spec.mixer + "' has no argument '" + it.key() +
                      "'; its arguments: " + (known.empty() ? "(none)" : known));
        }
        const json& def = defaults[it.key()];
        if (!value_fits_default(def, it.value()))
          throw Error(where + "." + it.key() + " expects a " + expected_type_name(def) + " (default " +
                      json_excerpt(def) + "), got " + json_excerpt(it.value()));
        spec.args[it.key()] = coerce_to_default(def, it.value());
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

MixerKeys model_mixer_keys(const std::string& model, const json& layers) {
  auto& reg = Registry::instance();
  const ModelFamily& family = reg.model(model);
  std::vector<std::string> mixers = family.layer_pattern;
  if (!layers.is_null() && !(layers.is_array() && layers.empty())) {
    mixers.clear();
    for (const auto& spec : parse_layer_specs(layers)) mixers.push_back(spec.mixer);
  }
  MixerKeys keys;
  for (const auto& name : mixers) {
    const json& defaults = reg.mixer(name).defaults;
    for (auto it = defaults.begin(); it != defaults.end(); ++it) {
      auto& owners = keys.declared_by[it.key()];
      if (std::find(owners.begin(), owners.end(), name) != owners.end()) continue;
      owners.push_back(name);
      if (owners.size() == 1) {
        keys.defaults[it.key()] = it.value();
      } else if (keys.defaults.contains(it.key()) && keys.defaults[it.key()] != it.value()) {
        keys.without_default[it.key()] = keys.defaults[it.key()];
        keys.defaults.erase(it.key());
      }
    }
  }
  for (auto it = family.overrides.begin(); it != family.overrides.end(); ++it) {
    keys.declared_by[it.key()];  // a family override is a key of the model even if no layer's mixer declares it
    keys.defaults[it.key()] = it.value();
    keys.without_default.erase(it.key());
  }
  return keys;
}

std::vector<LayerSpec> ModelConfig::pattern() const {
  if (!layers.empty()) return layers;
  std::vector<LayerSpec> out;
  for (const auto& name : Registry::instance().model(model).layer_pattern) out.push_back({name, json::object()});
  return out;
}

std::vector<std::string> ModelConfig::layer_mixers() const {
  const auto p = pattern();
  std::vector<std::string> out;
  for (int64_t i = 0; i < n_layers; ++i) out.push_back(p[i % p.size()].mixer);
  return out;
}

json ModelConfig::layer_args(int64_t layer_index) const {
  const auto p = pattern();
  const LayerSpec& spec = p[layer_index % p.size()];
  const json& defaults = Registry::instance().mixer(spec.mixer).defaults;
  json args = defaults;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    if (spec.args.contains(it.key())) args[it.key()] = spec.args[it.key()];
    else if (mixer_args.contains(it.key())) args[it.key()] = mixer_args[it.key()];
  }
  return args;
}

BlockImpl::BlockImpl(const ModelConfig& cfg, int64_t layer_index, std::shared_ptr<ModelScratch> scratch)
    : mixer_name(cfg.layer_mixers().at(layer_index)) {
  const auto& family = Registry::instance().mixer(mixer_name);
  const std::string& name = mixer_name;
  MixerContext ctx;
  ctx.d_model = cfg.d_model;
  ctx.n_heads = cfg.n_heads;
  ctx.layer_index = layer_index;
  ctx.n_layers = cfg.n_layers;
  ctx.args = cfg.layer_args(layer_index);
  ctx.scratch = std::move(scratch);
  const auto mixers = cfg.layer_mixers();
  ctx.first_layer_of_mixer = std::find(mixers.begin(), mixers.end(), mixer_name) - mixers.begin() == layer_index;
  mixer_norm = register_module("mixer_norm", BlockNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm));
  try {
    mixer = register_module("mixer", family.make(ctx));
  } catch (const json::exception& e) {
    throw Error("invalid arguments for mixer '" + name + "': " + e.what());
  }
  if (!cfg.block_mlp) return;  // Mamba's block: norm -> mixer -> residual
  mlp_norm = register_module("mlp_norm", BlockNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm));
  if (cfg.block_ffn == "cms")
    cms = register_module("cms", ContinuumMemory(cms_options(cfg)));
  else if (cfg.block_ffn == "rwkv_channel_mix")
    channel_mix = register_module("channel_mix", RwkvChannelMix(cfg.d_model, cfg.mlp_ratio, layer_index, cfg.n_layers));
  else
    mlp = register_module("mlp", SwiGLU(cfg.d_model, swiglu_hidden_size(cfg.d_model, cfg.mlp_ratio)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& h, LayerState* state) {
  auto x = h + mixer->forward(mixer_norm(h), state);
  if (cms) return x + cms(mlp_norm(x), state);
  if (channel_mix) return x + channel_mix(mlp_norm(x), state);
  if (!mlp) return x;
  return x + mlp(mlp_norm(x));
}

namespace {
// What a layer hands to later layers lives for one forward only (ModelScratch): empty before and after it.
struct ModelScratchScope {
  ModelScratch& s;
  explicit ModelScratchScope(ModelScratch& scratch) : s(scratch) { s.tensors.clear(); }
  ~ModelScratchScope() { s.tensors.clear(); }
};
}  // namespace

bool BlockImpl::packs_sequences(const torch::Tensor& h) const {
  // The feed-forward parts with a token shift or a state of their own (CMS, RWKV's channel mix) have no packed form.
  return !cms && !channel_mix && mixer->packs_sequences(h);
}

torch::Tensor BlockImpl::forward_packed(const torch::Tensor& h, const PackedSequences& seqs) {
  auto x = h + mixer->forward_packed(mixer_norm(h), seqs);
  if (!mlp) return x;
  return x + mlp(mlp_norm(x));
}

LanguageModelImpl::LanguageModelImpl(const ModelConfig& cfg) : cfg_(cfg) {
  embed_ = register_module("embed", torch::nn::Embedding(cfg.vocab_size, cfg.d_model));
  {
    torch::NoGradGuard g;
    embed_->weight.normal_(0.0, 0.02);
  }
  if (cfg.embed_norm) embed_norm_ = register_module("embed_norm", BlockNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm));
  for (int64_t i = 0; i < cfg.n_layers; ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), Block(cfg, i, scratch_)));
  final_norm_ = register_module("final_norm", BlockNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm));
  if (!cfg.tie_embeddings) lm_head_ = register_module("lm_head", make_linear(cfg.d_model, cfg.vocab_size));
}

torch::Tensor LanguageModelImpl::forward(const torch::Tensor& ids, ModelState* state) {
  return head(hidden(ids, state));
}

torch::Tensor LanguageModelImpl::forward_rows(const torch::Tensor& ids, const torch::Tensor& rows) {
  auto h = hidden(ids, nullptr);
  return head(h.reshape({-1, h.size(-1)}).index_select(0, rows));
}

bool LanguageModelImpl::packs_sequences(const torch::Tensor& like) const {
  for (const auto& b : blocks_)
    if (!b->packs_sequences(like)) return false;
  return true;
}

bool LanguageModelImpl::decode_step_is_static() const {
  for (const auto& b : blocks_)
    if (b->cms || !b->mixer->decode_step_is_static()) return false;
  return true;
}

torch::Tensor LanguageModelImpl::forward_packed(const torch::Tensor& ids, const torch::Tensor& starts) {
  if (ids.dim() != 2) throw Error("model input must be [batch, time] token ids");
  if (!starts.defined() || starts.sizes() != ids.sizes())
    throw Error("packed sequences: the sequence starts must be [batch, time] like the ids " + c10::str(ids.sizes()) +
                ", got " + (starts.defined() ? c10::str(starts.sizes()) : std::string("none")));
  const int64_t B = ids.size(0), T = ids.size(1);
  const auto seqs = PackedSequences::from_starts(starts, ids.device());
  auto h = embed(ids);
  if (packs_sequences(h)) {
    h = h.reshape({1, B * T, h.size(-1)});
    ModelScratchScope scope{*scratch_};
    for (auto& b : blocks_) h = b->forward_packed(h, seqs);
    packed_aux_ = torch::Tensor();
    return head(final_norm_(h).view({B, T, -1}));
  }
  // Padded groups: each a whole forward (what one layer hands to later ones stays inside its group).
  auto flat_ids = ids.reshape({-1, 1});
  std::vector<torch::Tensor> parts;
  torch::Tensor aux;
  for (const auto& bk : seqs.buckets) {
    auto hb = hidden(padded_rows(flat_ids, bk).squeeze(-1), nullptr);
    parts.push_back(unpad_rows(hb, bk));
    auto a = aux_loss();
    if (a.defined()) {
      auto weighted = a * (double(bk.packed.size(0)) / double(seqs.total()));
      aux = aux.defined() ? aux + weighted : weighted;
    }
  }
  auto packed = unbucket_rows(parts, seqs);
  packed_aux_ = aux;
  return head(packed.view({B, T, -1}));
}

torch::Tensor LanguageModelImpl::head(const torch::Tensor& h) {
  return cfg_.tie_embeddings ? torch::matmul(h, embed_->weight.t()) : lm_head_(h);
}

torch::Tensor LanguageModelImpl::hidden(const torch::Tensor& ids, ModelState* state) {
  if (ids.dim() != 2) throw Error("model input must be [batch, time] token ids");
  if (state && state->size() != blocks_.size()) *state = initial_state();
  packed_aux_ = torch::Tensor();
  auto h = embed(ids);
  ModelScratchScope scope{*scratch_};
  for (size_t i = 0; i < blocks_.size(); ++i) {
    LayerState* ls = state ? &(*state)[i] : nullptr;
    h = blocks_[i]->forward(h, ls);
    if (ls) ls->pos += ids.size(1);
  }
  return final_norm_(h);
}

torch::Tensor LanguageModelImpl::embed(const torch::Tensor& ids) {
  auto h = embed_(ids).to(embed_->weight.scalar_type());
  return embed_norm_ ? embed_norm_(h) : h;
}

torch::Tensor LanguageModelImpl::aux_loss() const {
  if (packed_aux_.defined()) return packed_aux_;
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
