// Tasks declare, the harness executes: a task = generator/loader + format + scorer.
// Token-level tasks (MQAR, MAD, ...) produce (input_ids, labels) examples that the trainer and
// `mnemo eval` consume; every task can write its examples as JSONL (`mnemo generate`).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "synthetic/example.h"

namespace mnemo {

// Base: every task can generate rows for `mnemo generate`.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual json params() const = 0;  // the resolved parameters (recorded with every result)
  // Rows for `mnemo generate`: one JSON object per example.
  virtual std::vector<json> generate_rows(Split split, int64_t n, uint64_t seed) const = 0;
};

// Token-level tasks the trainer can learn: fixed vocabulary, per-position labels, and
// accuracy over labelled positions averaged per example then over examples (tasks/scoring.h).
class TokenTask : public Task {
 public:
  virtual int64_t vocab_size() const = 0;
  virtual int64_t seq_len() const = 0;
  virtual std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const = 0;
  // Default: {"input_ids": [...], "labels": [...]} (+ meta keys).
  std::vector<json> generate_rows(Split split, int64_t n, uint64_t seed) const override;
  // Test metrics the task defines beyond loss and per-example accuracy (lm-eval's corpus-level metrics), from the
  // argmax predictions: predictions[e][t] = argmax of the logits at position t of test example e (every position,
  // as long as its labels). Default: none. MQAR: accuracy per num_kv_pairs slice; MAD: accuracy_macro.
  virtual json test_metrics_of(const std::vector<TokenExample>& test,
                               const std::vector<std::vector<int64_t>>& predictions) const {
    return json::object();
  }
  // The names test_metrics_of returns, known before any prediction (the evaluation declares its metrics first).
  virtual std::vector<std::string> test_metric_names() const { return {}; }
  // test_metrics_of over the argmax of logits_fn ([B, T] ids -> [B, T, V] logits), in batches of 256.
  json test_metrics(const std::function<torch::Tensor(const torch::Tensor&)>& logits_fn,
                    const std::vector<TokenExample>& test, const torch::Device& device) const;
};

struct TaskFamily {
  std::string name;
  std::string description;
  json defaults;  // parameter name -> default value (the CLI flag is --name-with-dashes)
  json help;      // parameter name -> one-line description
  bool trainable = false;  // the trainer learns it (a TokenTask, or language modelling)
  // How `mnemo eval --tasks` scores a checkpoint on it: "token_predictions" (a TokenTask: TokenTaskEvaluation),
  // "generate_until" (a GenerationTask: GenerationTaskEvaluation), "token_logprobs" (lm_ppl: LmPplEvaluation), ""
  // (not through the driver's --tasks).
  std::string evaluation;
  std::function<std::shared_ptr<Task>(const json& params)> make;  // params = defaults merged
};

class TaskRegistry {
 public:
  static TaskRegistry& instance();  // built-ins registered on first use
  void add(TaskFamily f);
  const TaskFamily& at(const std::string& name) const;  // throws Error listing known tasks
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;
  // Merge user params into the defaults; an unknown key or a value of the wrong type is an Error.
  json resolve(const std::string& name, const json& user_params) const;
  std::shared_ptr<Task> make(const std::string& name, const json& user_params) const;

 private:
  std::vector<TaskFamily> families_;
};

// Defined in tasks/builtin_tasks.cpp: calls every task's register function.
void register_builtin_tasks(TaskRegistry& r);

}  // namespace mnemo
