// The training step on static tensors, so that it can be captured once as a CUDA graph and replayed (config key
// cuda_graph; docs/gpu.md#cuda-graphs). The synthetic sweeps' small models (d 64–256, 2–4 layers) are launch-bound
// on any GPU: a replay issues the step's thousands of kernels as one launch.
//
// One step = copy the batch into the static inputs, then on the device alone: zero the gradients, forward and loss
// (the run's precision), backward, the global-norm clip, AdamW. Nothing in it waits for the host: the learning rate
// and AdamW's step number are device scalars the host writes before each run, the clip's norm stays on the device
// (torch's clip_grad_norm_: coef = min(1, clip / (‖g‖ + 1e-6))), and AdamW is torch::optim::AdamW's update written
// with those scalars:
//   p ← p (1 − lr·wd);  m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;
//   p ← p − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
// on the optimiser's own state (AdamWParamState's exp_avg, exp_avg_sq and step), so checkpoints and resume are
// those of the eager step. Run eagerly (capture false) it is the eager step's arithmetic, which the CPU tests
// check; captured, the warm-up runs that capture needs are undone (weights and moments restored), so the run
// trains on each batch once.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "engine/training/cuda_graph.h"
#include "engine/training/data_source.h"
#include "runtime/backbone.h"
#include "runtime/mixed_precision.h"

namespace mnemo {

class StaticTrainStep {
 public:
  // `example`: a batch of the run's shape (every later batch must have it). Throws Error naming the cause where
  // capture is asked for and cannot be done (no CUDA LibTorch, a CPU device, a step that waits for the host).
  StaticTrainStep(Backbone& model, torch::optim::AdamW& optimizer, const TrainBatch& example, double clip,
                  const torch::Device& device, Precision precision, bool capture);
  ~StaticTrainStep();

  struct Values {
    double loss = 0;
    double aux = std::numeric_limits<double>::quiet_NaN();        // the auxiliary loss, where the model has one
    double grad_norm = 0;  // before clipping; 0 with the clip off
  };
  // One optimiser step on `batch` at learning rate `lr` (one host synchronisation: reading the values).
  Values run(const TrainBatch& batch, double lr);

  bool captured() const { return graph_ != nullptr; }

 private:
  struct Group {
    std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
    double weight_decay, eps, beta1, beta2;
  };
  void device_step();        // the work above, from the static inputs
  void load(const TrainBatch& batch, double lr);
  void advance_host_steps();  // AdamWParamState::step += 1 (what a checkpoint records)

  Backbone& model_;
  torch::optim::AdamW& optimizer_;
  double clip_;
  torch::Device device_;
  Precision precision_;
  std::vector<Group> groups_;
  torch::Tensor ids_, labels_;  // static inputs
  torch::Tensor lr_, t_;        // device scalars: learning rate, AdamW's step number (1-based)
  int64_t steps_done_ = 0;      // AdamW steps taken before the next run (the optimiser state's count)
  torch::Tensor loss_, aux_, norm_;
  std::unique_ptr<CapturedStep> graph_;
};

}  // namespace mnemo
