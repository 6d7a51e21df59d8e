// The network a task trains (docs/tasks.md#mad): the language model, or, for a task whose
// parameter "backbone" is "autoencoder" (MAD compression), mad-lab's autoencoder around the same
// blocks. Both map ids [B, T] -> logits [B, T, V]; the trainer, the evaluator and the checkpoints
// see only this.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "runtime/model.h"

namespace mnemo {

struct Backbone {
  std::string kind;  // "language_model" | "autoencoder"
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;  // ids -> logits
  // ids, sequence starts (bool [B, T]) -> logits, each sequence from the initial state (LanguageModelImpl::
  // forward_packed); empty for a backbone without packed sequences (the autoencoder).
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> forward_packed;
  std::function<torch::Tensor()> aux_loss;                     // undefined tensor when none
  std::function<int64_t()> num_parameters;
  std::function<const ModelConfig&()> config;
  LanguageModel language_model{nullptr};  // kind == "language_model" only (generation, decode)
};

// Error naming `kind` unless it is one of the two.
Backbone make_backbone(const std::string& kind, const ModelConfig& config);

}  // namespace mnemo
