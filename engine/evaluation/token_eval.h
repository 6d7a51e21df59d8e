// The token-level objective (cross-entropy over labelled positions) and evaluation (loss +
// per-example accuracy, tasks/scoring.h; docs/tasks.md#mqar).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/backbone.h"
#include "tasks/task.h"
#include "tasks/token_batch.h"

namespace mnemo {

// Cross-entropy over labelled positions (ignore_index -100), mean over those positions.
torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// The same summed over labelled positions (gradient accumulation divides by the step's label count).
torch::Tensor token_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels);

struct TokenEvalResult {
  double loss = 0;      // mean over all labelled positions
  double accuracy = 0;  // mean over examples of per-example accuracy
  int64_t n_examples = 0, n_labels = 0;
  std::vector<double> per_example;
};

// In eval mode without gradients (the training flag is restored).
TokenEvalResult evaluate_tokens(Backbone& model, const std::vector<TokenExample>& examples, int64_t batch_size,
                                const torch::Device& device);

}  // namespace mnemo
