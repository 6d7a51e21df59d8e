// A token task (MQAR, MAD) as an evaluation task of the one task API (tasks/harness/harness_task.h): its documents
// are the task's test examples, each asking one token_predictions request (the model's logits over the example's
// input ids, scored against its labels). Metrics: `accuracy` (per example, then the mean over examples: the
// token tasks' rule, tasks/scoring.h), `loss` (cross-entropy over every labelled position) and the task's own
// test metrics (MQAR: accuracy per num_kv_pairs slice; MAD: accuracy_macro), computed over all documents at once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tasks/harness/harness_task.h"
#include "tasks/task.h"

namespace mnemo {

class TokenTaskEvaluation : public harness::HarnessTask {
 public:
  // `n` test examples drawn with `seed` (the examples the trainer's evaluation draws with the run's seed).
  TokenTaskEvaluation(std::shared_ptr<TokenTask> task, int64_t n, uint64_t seed);
  std::string name() const override { return task_->name(); }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "token_predictions"; }
  std::vector<harness::MetricSpec> metrics() const override;
  int64_t num_docs() const override { return static_cast<int64_t>(examples_.size()); }
  json doc(int64_t doc_id) const override;
  std::string target(const json& doc) const override;
  std::vector<harness::Request> requests(int64_t doc_id) const override;  // none for an example without labels
  json process_results(const json& doc, const std::vector<harness::Response>& responses) const override;
  json data_files() const override { return json::array(); }  // generated, not read
  double aggregate_corpus(const std::string& metric, const std::vector<json>& values) const override;
  json cell_setting() const override { return task_->params(); }
  bool uses_tokenizer() const override { return false; }
  const TokenTask& task() const { return *task_; }

 private:
  std::shared_ptr<TokenTask> task_;
  std::vector<TokenExample> examples_;
  std::vector<std::string> corpus_metrics_;
};

}  // namespace mnemo
