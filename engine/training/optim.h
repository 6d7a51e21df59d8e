// Optimiser set-up: AdamW with weight decay on 2-D weight matrices only (docs/models.md#conventions),
// cosine schedule with linear warm-up (hand-written: LibTorch 1.13 has none).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "core/common.h"

namespace mnemo {

// Weight decay for parameter `name` (a key of model.named_parameters()): never for tensors with < 2 dims
// (norms, biases, gate biases, A_log, dt_bias) nor for those in `no_decay`, the set that
// no_weight_decay_parameters(model) gives (embeddings, persistent tokens, learned initial memory states,
// declared by their modules: runtime/no_weight_decay.h).
bool decays(const std::string& name, const torch::Tensor& p, const std::set<std::string>& no_decay);

// torch::optim::AdamW whose step is one multi-tensor kernel per parameter group where LibTorch has one
// (torch_compat::fused_adamw_step: LibTorch >= 2.4, CUDA and CPU), instead of ~10 kernels per parameter: the same
// update in the same state (AdamWParamState: step, exp_avg, exp_avg_sq), so checkpoints move between the two
// and the per-parameter step of the base class runs where there is no such kernel (LibTorch 1.13), with amsgrad,
// or where a group's parameters differ in device or dtype.
class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Whether the last step ran the multi-tensor kernel.
  bool last_step_fused() const { return last_step_fused_; }

 private:
  bool fusable() const;
  struct StepCount {
    torch::Tensor value;  // float scalar on the parameter's device: the step count the kernel reads
    int64_t at = -1;      // the AdamWParamState step it mirrors (a restored checkpoint changes that)
  };
  std::unordered_map<const void*, StepCount> step_counts_;
  bool last_step_fused_ = false;
};

// The AdamW state of parameter `p` (step, exp_avg, exp_avg_sq), made (step 0, zero moments) where the optimiser has
// none yet: what the first step would make.
torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& p);

// AdamW (a MultiTensorAdamW) over the model's trainable parameters: two groups, with and without weight decay.
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const json& cfg);

// lr(step) for step in [0, total): linear warm-up from lr/warmup to lr over `warmup` steps,
// then cosine from lr down to min_ratio * lr at the last step.
double cosine_lr(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio);

void set_lr(torch::optim::Optimizer& opt, double lr);

}  // namespace mnemo
