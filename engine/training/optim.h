// Optimiser set-up: AdamW with weight decay on 2-D weight matrices only (docs/models.md#conventions),
// cosine schedule with linear warm-up (hand-written: LibTorch 1.13 has none).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>

#include "core/common.h"

namespace mnemo {

// Weight decay for parameter `name` (a key of model.named_parameters()): never for tensors with < 2 dims
// (norms, biases, gate biases, A_log, dt_bias) nor for those in `no_decay`, the set that
// no_weight_decay_parameters(model) gives (embeddings, persistent tokens, learned initial memory states,
// declared by their modules: runtime/no_weight_decay.h).
bool decays(const std::string& name, const torch::Tensor& p, const std::set<std::string>& no_decay);

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const json& cfg);

// lr(step) for step in [0, total): linear warm-up from lr/warmup to lr over `warmup` steps,
// then cosine from lr down to min_ratio * lr at the last step.
double cosine_lr(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio);

void set_lr(torch::optim::Optimizer& opt, double lr);

}  // namespace mnemo
