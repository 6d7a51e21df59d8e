// Optimiser set-up: AdamW with weight decay on 2-D weight matrices only (spec models.md §1.6),
// cosine schedule with linear warm-up (hand-written: LibTorch 1.13 has none).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>

#include "runtime/common.h"

namespace mnemo {

// Parameters that never get weight decay: every tensor with < 2 dims (norms, biases, gate
// biases, A_log, dt_bias) and 2-D tensors whose name marks them as embeddings, persistent
// tokens, learned initial states or feature-map coefficients.
bool decays(const std::string& name, const torch::Tensor& p);

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const json& cfg);

// lr(step) for step in [0, total): linear warm-up from lr/warmup to lr over `warmup` steps,
// then cosine from lr down to min_ratio * lr at the last step.
double cosine_lr(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio);

void set_lr(torch::optim::Optimizer& opt, double lr);

}  // namespace mnemo
