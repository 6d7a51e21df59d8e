// The six MAD tasks as registered token tasks (docs/tasks.md#mad): mad_in_context_recall,
// mad_fuzzy_in_context_recall, mad_noisy_in_context_recall, mad_selective_copying,
// mad_compression, mad_memorization. Generators in synthetic/mad.h.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "synthetic/mad.h"
#include "tasks/mad_metrics.h"
#include "tasks/task.h"

namespace mnemo {

void register_mad_tasks(TaskRegistry& r);  // called from tasks/builtin_tasks.cpp

// `mnemo generate mad --task T ...`: the name "mad" with params["task"] = T (any of
// "selective_copying", "selective-copying", "mad_selective_copying") resolves to
// "mad_selective_copying"; the caller then drops "task" from the params. Other names are
// returned unchanged. Error if "mad" comes without a valid "task".
std::string resolve_task_alias(const std::string& name, const json& params);

// The model backbone a token task needs: "autoencoder" (runtime/mad_autoencoder.h) for
// mad_compression, "language_model" for every other task. Read from params()["backbone"].
std::string task_backbone(const Task& task);

// Fraction of test inputs that also occur in the training inputs (mad-lab's leakage check;
// it warns above 0.001).
double fraction_of_test_in_train(const std::vector<TokenExample>& train, const std::vector<TokenExample>& test);

// mad-lab's test accuracy of a model (tasks/mad_metrics.h mad_accuracy): argmax predictions of
// `logits_fn` ([B, T] ids -> [B, T, V] logits) over `examples` in batches of `batch_size`
// (mad-lab: 128, which its macro averaging depends on).
MadAccuracy evaluate_mad_accuracy(const std::function<torch::Tensor(const torch::Tensor&)>& logits_fn,
                                  const std::vector<TokenExample>& examples, int64_t vocab_size,
                                  const torch::Device& device, int64_t batch_size = kMadBatchSize);

}  // namespace mnemo
