// The language model skeleton (spec models.md §2.1): embedding -> N blocks
// (pre-RMSNorm, mixer, residual, pre-RMSNorm, SwiGLU, residual) -> final norm -> tied LM head.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/mixer.h"
#include "runtime/layers.h"

namespace mnemo {

// Model-wide settings; every other key of the flat config that a mixer family declares is
// handed to that family's args struct.
struct ModelConfig {
  std::string model = "transformer";  // a model family (mixer or hybrid pattern)
  int64_t vocab_size = 8192;
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  double mlp_ratio = 4.0;
  bool tie_embeddings = true;
  double norm_eps = 1e-6;
  std::vector<std::string> layers;  // per-layer mixer names; empty = the family's pattern
  json mixer_args;                  // the flat config (family args are read from it)

  std::vector<std::string> layer_mixers() const;  // resolved, one per layer
};

using ModelState = std::vector<LayerState>;

struct BlockImpl : torch::nn::Module {
  BlockImpl(const ModelConfig& cfg, int64_t layer_index, const std::string& mixer_name);
  torch::Tensor forward(const torch::Tensor& h, LayerState* state);
  RMSNorm mixer_norm{nullptr}, mlp_norm{nullptr};
  std::shared_ptr<Mixer> mixer;
  SwiGLU mlp{nullptr};
  std::string mixer_name;
};
TORCH_MODULE(Block);

class LanguageModelImpl : public torch::nn::Module {
 public:
  explicit LanguageModelImpl(const ModelConfig& cfg);
  // ids: [B, T] int64 -> logits [B, T, V]. With a state, continues from it (see Mixer).
  torch::Tensor forward(const torch::Tensor& ids, ModelState* state = nullptr);
  ModelState initial_state() const { return ModelState(blocks_.size()); }
  torch::Tensor aux_loss() const;  // sum of the mixers' auxiliary losses of the last forward
  int64_t num_parameters() const;
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  torch::nn::Embedding embed_{nullptr};
  std::vector<Block> blocks_;
  RMSNorm final_norm_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // only when embeddings are not tied
};
TORCH_MODULE(LanguageModel);

// Config keys that belong to the model skeleton (the rest are task, training or mixer keys).
const std::vector<std::string>& model_config_keys();
ModelConfig model_config_from_json(const json& flat);

}  // namespace mnemo
