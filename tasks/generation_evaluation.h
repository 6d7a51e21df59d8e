// A generation task (S-NIAH, BABILong) as an evaluation task of the one task API (tasks/harness/harness_task.h): the
// cells of its generation plan (tasks/eval_task.h GenerationPlan, e.g. lengths x depths) are built once, their
// samples become the documents (each remembering its cell as "cell"), one generate_until request each, answered
// without truncation (the task sized its prompts) and scored by the task's process_results. The driver records one
// cell per setting: the value is RULER's and BABILong's mean_percent of the scores, the details the plan's.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tasks/eval_task.h"
#include "tasks/harness/harness_task.h"

namespace mnemo {

class GenerationTaskEvaluation : public harness::HarnessTask {
 public:
  // Builds every cell of task.generation_plan(ctx) (Errors for bad options, as the plan raises them). `task` must
  // outlive this object, unless `owner` (the Task object it is part of) is given: then this object keeps it.
  GenerationTaskEvaluation(const GenerationTask& task, const EvalContext& ctx, std::shared_ptr<const Task> owner = nullptr);
  std::string name() const override { return plan_.task; }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "generate_until"; }
  std::vector<harness::MetricSpec> metrics() const override;
  int64_t num_docs() const override { return static_cast<int64_t>(docs_.size()); }
  json doc(int64_t doc_id) const override;
  std::string target(const json& doc) const override;
  std::vector<harness::Request> requests(int64_t doc_id) const override;
  // {metric: the task's process_results record ({"prediction", "target", ..., "score"})}.
  json process_results(const json& doc, const std::vector<harness::Response>& responses) const override;
  json data_files() const override { return json::array(); }  // the plan's details name and hash what it read
  // mean_percent of the documents' scores.
  double aggregate_corpus(const std::string& metric, const std::vector<json>& values) const override;
  harness::GenerationPolicy generation_policy() const override { return {false, plan_.prefill_chunk}; }
  json doc_setting(const json& doc) const override { return doc.at("cell"); }
  json cell_details(const json& setting) const override;
  std::string cell_label(const json& setting) const override;
  // The tokenizer the plan encodes with (the evaluation's, or the task's `tokenizer` parameter).
  std::shared_ptr<Tokenizer> own_tokenizer() const override { return plan_.tokenizer; }

 private:
  std::shared_ptr<const Task> owner_;
  const GenerationTask& task_;
  GenerationPlan plan_;
  std::vector<json> docs_;
  std::vector<harness::Request> requests_;
  std::map<std::string, std::pair<json, std::string>> cells_;  // setting.dump() -> (details, label)
};

}  // namespace mnemo
