// The language model skeleton (docs/models.md#block-skeleton): embedding (-> a norm with embed_norm) -> N blocks
// (pre-norm, mixer, residual, pre-norm, SwiGLU, the Continuum Memory System or RWKV's channel mix, residual; the last
// three absent with block_mlp false) -> final norm -> tied LM head. The norms are RMSNorm or LayerNorm (block_norm).
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/mixer.h"
#include "runtime/packed_sequences.h"
#include "runtime/hope/cms.h"
#include "runtime/rwkv7/channel_mix.h"
#include "runtime/layers.h"

namespace mnemo {

// One entry of a layer pattern: a mixer and the arguments given to that layer alone. In a config,
// `layers` lists mixer names or objects {"mixer": name, key: value, ...}, repeated over n_layers.
struct LayerSpec {
  std::string mixer;
  json args = json::object();  // keys the mixer declares (checked by parse_layer_specs)
};

// Model-wide settings; every other key of the flat config that a mixer family declares is
// handed to that family's args struct (in every layer whose mixer declares it).
struct ModelConfig {
  std::string model = "transformer";  // a model family (mixer or hybrid pattern)
  int64_t vocab_size = 8192;
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  double mlp_ratio = 4.0;
  bool block_mlp = true;              // false: blocks are pre-RMSNorm, mixer, residual only (Mamba's blocks)
  std::string block_ffn = "swiglu";   // the blocks' feed-forward part: "swiglu" | "cms" (runtime/hope/cms.h) |
                                      // "rwkv_channel_mix" (runtime/rwkv7/channel_mix.h)
  std::string block_norm = "rmsnorm";  // every norm of the skeleton: "rmsnorm" | "layernorm" (BlockNorm)
  bool embed_norm = false;             // a norm right after the embedding (RWKV's ln0, fla's RWKV-7 pre_norm)
  std::vector<int64_t> cms_chunk_sizes = {16, 64, 256};  // block_ffn "cms": one level per entry, fastest first
  double cms_hidden_ratio = 1.0;
  double cms_lr = 0.1;
  bool tie_embeddings = true;
  double norm_eps = 1e-6;
  std::vector<LayerSpec> layers;  // the config's pattern; empty = the family's pattern
  json mixer_args;                // the flat config (family args are read from it)

  std::vector<LayerSpec> pattern() const;         // the config's pattern, else the family's
  std::vector<std::string> layer_mixers() const;  // resolved, one per layer
  // Arguments of layer i's mixer: the mixer's defaults <- flat keys it declares <- the layer's own.
  json layer_args(int64_t layer_index) const;
};

// Parses a config's `layers` value (see LayerSpec): unknown mixers, keys the mixer does not declare
// and values of the wrong type are errors naming the entry.
std::vector<LayerSpec> parse_layer_specs(const json& layers);

using ModelState = std::vector<LayerState>;

struct BlockImpl : torch::nn::Module {
  // The mixer of cfg.layer_mixers()[layer_index]; `scratch` is the model's (MixerContext::scratch).
  BlockImpl(const ModelConfig& cfg, int64_t layer_index, std::shared_ptr<ModelScratch> scratch = nullptr);
  torch::Tensor forward(const torch::Tensor& h, LayerState* state);
  // Packed sequences, h [1, N, d] (docs/models.md#packed-sequences): where packs_sequences(h) holds.
  bool packs_sequences(const torch::Tensor& h) const;
  torch::Tensor forward_packed(const torch::Tensor& h, const PackedSequences& seqs);
  BlockNorm mixer_norm{nullptr}, mlp_norm{nullptr};
  std::shared_ptr<Mixer> mixer;
  SwiGLU mlp{nullptr};
  ContinuumMemory cms{nullptr};             // instead of mlp with block_ffn "cms"
  RwkvChannelMix channel_mix{nullptr};      // instead of mlp with block_ffn "rwkv_channel_mix"
  std::string mixer_name;
};
TORCH_MODULE(Block);

class LanguageModelImpl : public torch::nn::Module {
 public:
  explicit LanguageModelImpl(const ModelConfig& cfg);
  // ids: [B, T] int64 -> logits [B, T, V]. With a state, continues from it (see Mixer).
  torch::Tensor forward(const torch::Tensor& ids, ModelState* state = nullptr);
  // The logits of the flattened positions `rows` (int64 indices into [B·T]) alone: [rows, V]. The same values as
  // forward(ids).reshape({-1, V}).index_select(0, rows), without the LM head's work at the other positions (a
  // log-likelihood request scores only its continuation, engine/evaluation/loglikelihood.cpp).
  torch::Tensor forward_rows(const torch::Tensor& ids, const torch::Tensor& rows);
  // Packed sequences (docs/models.md#packed-sequences): ids [B, T] and `starts` (bool [B, T], true where a new
  // sequence begins; every row begins one) -> logits [B, T, V], each sequence read from the initial state, as if
  // it were given alone. One row of B·T tokens through the mixers' packed forms where every mixer has one for these
  // tensors (the fused kernels on a GPU); otherwise the sequences as right-padded rows grouped by length
  // (padded_buckets), one forward per group, whose auxiliary losses are averaged with the groups' token counts as
  // weights.
  torch::Tensor forward_packed(const torch::Tensor& ids, const torch::Tensor& starts);
  // Whether forward_packed takes the single-row route for inputs of this device and dtype.
  bool packs_sequences(const torch::Tensor& like) const;
  // Whether every block's decode step is static (Mixer::decode_step_is_static; the CMS feed-forward counts its
  // position), so that the model's decode step can be captured as a CUDA graph.
  bool decode_step_is_static() const;
  ModelState initial_state() const { return ModelState(blocks_.size()); }
  torch::Tensor aux_loss() const;  // sum of the mixers' auxiliary losses of the last forward
  int64_t num_parameters() const;
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  torch::nn::Embedding embed_{nullptr};
  BlockNorm embed_norm_{nullptr};  // embed_norm only
  std::vector<Block> blocks_;
  BlockNorm final_norm_{nullptr};
  std::shared_ptr<ModelScratch> scratch_ = std::make_shared<ModelScratch>();
  torch::nn::Linear lm_head_{nullptr};  // only when embeddings are not tied
  torch::Tensor hidden(const torch::Tensor& ids, ModelState* state);  // the final norm's output [B, T, d]
  torch::Tensor embed(const torch::Tensor& ids);                       // embedding (and embed_norm) [B, T, d]
  torch::Tensor packed_aux_;  // the groups' weighted auxiliary loss of the last padded forward_packed
  torch::Tensor head(const torch::Tensor& h);                          // tied embedding or lm_head
};
TORCH_MODULE(LanguageModel);

// The mixer keys a model's flat config accepts (docs/models.md#block-skeleton, flat form): every argument that a mixer of its
// pattern declares, with the family's overrides. A key that two of those mixers declare with different defaults has
// no flat default: each layer keeps its own mixer's default unless the config sets the key flat (then it applies to
// every layer whose mixer declares it), so no default is carried silently from one mixer to another.
struct MixerKeys {
  json defaults = json::object();           // key -> flat default
  json without_default = json::object();    // key -> one declaring mixer's default (the type a value must have)
  std::map<std::string, std::vector<std::string>> declared_by;  // key -> the pattern's mixers that declare it
  bool contains(const std::string& key) const { return declared_by.count(key) > 0; }
  const json& type_witness(const std::string& key) const {
    return defaults.contains(key) ? defaults[key] : without_default[key];
  }
};
// `layers`: the config's value (null or [] = the family's pattern).
MixerKeys model_mixer_keys(const std::string& model, const json& layers);

// Config keys that belong to the model skeleton (the rest are task, training or mixer keys).
const std::vector<std::string>& model_config_keys();
ModelConfig model_config_from_json(const json& flat);
CmsOptions cms_options(const ModelConfig& c);  // the Continuum Memory System of block_ffn "cms"

}  // namespace mnemo
