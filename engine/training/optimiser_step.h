// One optimiser step of training, eager (optimiser_step: gradient accumulation, data-parallel reduction, packed
// documents) or on static tensors captured as a CUDA graph (graphed_step, config key cuda_graph).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "core/common.h"
#include "engine/training/data_source.h"
#include "engine/training/distributed.h"
#include "engine/training/static_step.h"
#include "runtime/backbone.h"
#include "runtime/mixed_precision.h"

namespace mnemo {

// One optimiser step over grad_accum micro-batches: Σ over micro-batches of (summed token loss /
// the step's labelled positions) is the loss of the whole batch, so accumulation equals one big batch.
// Data-parallel (dist set): each rank's loss is its share of that sum (its labelled positions' losses over the
// labelled positions of every rank), so the ranks' summed gradients are the whole batch's gradient.
struct StepResult {
  double loss = NAN, aux = NAN, grad_norm = 0;
  int64_t tokens = 0;  // every rank's
  double data_s = 0;   // seconds spent drawing the micro-batches (the data-wait share of a step)
  bool stop = false;   // a rank was asked to stop (SIGINT / SIGTERM) during the step
};

StepResult optimiser_step(Backbone& model, torch::optim::Optimizer& optimizer, DataSource& data, int64_t step,
                          int64_t accum, double clip, const torch::Device& device, Precision precision,
                          Distributed* dist);

// cuda_graph: the step on static tensors, captured once (engine/training/static_step.h); null when the key is off.
// Throws Error naming what a captured step cannot do (a CPU device, grad_accum > 1, data-parallel, packed documents).
std::unique_ptr<StaticTrainStep> make_graphed_step(const json& cfg, Backbone& model, torch::optim::AdamW& optimizer,
                                                   DataSource& data, int64_t step, double clip,
                                                   const torch::Device& device, Precision precision,
                                                   const Distributed* dist);
// One replay of it on micro-batch 0 of `step` at learning rate `lr`.
StepResult graphed_step(StaticTrainStep& graphed, DataSource& data, int64_t step, double lr);

}  // namespace mnemo
