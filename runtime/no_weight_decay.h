// Parameters that take no weight decay, declared by the modules that own them (as fla's `_no_weight_decay`
// attribute), not recognised by name: docs/models.md#conventions exempts A_log, dt_bias, persistent tokens, learned
// initial memory states and feature-map coefficients; tensors with < 2 dims are exempt anyway (engine/training/optim.h).
#pragma once
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

namespace mnemo {

// Mixed into a module class that owns such parameters.
class DeclaresNoWeightDecay {
 public:
  virtual ~DeclaresNoWeightDecay() = default;
  // Parameters of this module without weight decay, named as its named_parameters() names them: its own
  // (as passed to register_parameter) or, dotted, a submodule's ("unembed.weight").
  virtual std::vector<std::string> no_weight_decay() const = 0;
};

// Full dotted names, as root.named_parameters() gives them ("block0.mixer.A_log"), of every parameter that a
// module under `root` (root included) declares, plus the weight of every torch::nn::Embedding (the embedding
// table). Throws mnemo::Error if a module declares a name that is not one of its parameters.
std::set<std::string> no_weight_decay_parameters(const torch::nn::Module& root);

}  // namespace mnemo
