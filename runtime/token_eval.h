// Batching of token examples and the token-level evaluation (loss + per-example accuracy,
// spec tasks.md §7.2: mean over labelled positions per example, then mean over examples).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/model.h"
#include "tasks/task.h"

namespace mnemo {

struct TokenBatch {
  torch::Tensor input_ids;  // [B, T] int64 (right-padded with 0)
  torch::Tensor labels;     // [B, T] int64 (-100 where not scored or padded)
};

TokenBatch collate(const std::vector<const TokenExample*>& examples, const torch::Device& device);

// Cross-entropy over labelled positions (ignore_index -100), mean over those positions.
torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// Per-example accuracy: for each row with >= 1 label, mean(argmax == label) over its labels.
// Returns one value per row (NaN for rows without labels).
torch::Tensor per_example_accuracy(const torch::Tensor& logits, const torch::Tensor& labels);

struct TokenEvalResult {
  double loss = 0;      // mean over all labelled positions
  double accuracy = 0;  // mean over examples of per-example accuracy
  int64_t n_examples = 0, n_labels = 0;
  std::vector<double> per_example;
};

TokenEvalResult evaluate_tokens(LanguageModelImpl& model, const std::vector<TokenExample>& examples,
                                int64_t batch_size, const torch::Device& device);

}  // namespace mnemo
