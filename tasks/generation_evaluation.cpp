#include "tasks/generation_evaluation.h"

#include "tasks/scoring.h"

namespace mnemo {

GenerationTaskEvaluation::GenerationTaskEvaluation(const GenerationTask& task, const EvalContext& ctx,
                                                   std::shared_ptr<const Task> owner)
    : owner_(std::move(owner)), task_(task), plan_(task.generation_plan(ctx)) {
  if (!plan_.tokenizer) throw Error("task " + plan_.task + ": its generation plan names no tokenizer");
  for (int64_t c = 0; c < plan_.n_cells; ++c) {
    GenerationCell cell = plan_.cell(c);
    if (cell.docs.size() != cell.requests.size())
      throw Error("task " + plan_.task + ": cell " + json_excerpt(cell.setting) + " has " +
                  std::to_string(cell.docs.size()) + " samples but " + std::to_string(cell.requests.size()) +
                  " requests");
    const std::string key = cell.setting.dump();
    if (cells_.count(key)) throw Error("task " + plan_.task + ": cell " + json_excerpt(cell.setting) + " twice in its plan");
    cells_[key] = {cell.details, cell.label};
    for (size_t i = 0; i < cell.docs.size(); ++i) {
      json d = cell.docs[i];
      d["cell"] = cell.setting;
      harness::Request r = cell.requests[i];
      r.doc_id = static_cast<int64_t>(docs_.size());
      r.idx = 0;
      docs_.push_back(std::move(d));
      requests_.push_back(std::move(r));
    }
  }
}

std::vector<harness::MetricSpec> GenerationTaskEvaluation::metrics() const {
  return {{plan_.metric, harness::kCorpusAggregation, true}};
}

json GenerationTaskEvaluation::doc(int64_t doc_id) const {
  if (doc_id < 0 || doc_id >= num_docs())
    throw Error("task " + name() + ": document " + std::to_string(doc_id) + " is outside its " +
                std::to_string(num_docs()) + " samples");
  return docs_[static_cast<size_t>(doc_id)];
}

std::string GenerationTaskEvaluation::target(const json& doc) const {
  if (doc.contains("target") && doc["target"].is_string()) return doc["target"].get<std::string>();
  if (doc.contains("outputs")) return doc["outputs"].dump();
  return "";
}

std::vector<harness::Request> GenerationTaskEvaluation::requests(int64_t doc_id) const {
  if (doc_id < 0 || doc_id >= num_docs())
    throw Error("task " + name() + ": document " + std::to_string(doc_id) + " is outside its " +
                std::to_string(num_docs()) + " samples");
  return {requests_[static_cast<size_t>(doc_id)]};
}

json GenerationTaskEvaluation::process_results(const json& doc, const std::vector<harness::Response>& responses) const {
  if (responses.size() != 1)
    throw Error("task " + name() + ": " + std::to_string(responses.size()) + " responses for one generate_until request");
  json sample_doc = doc;
  sample_doc.erase("cell");  // the task's own document, as its plan made it
  return {{plan_.metric, task_.process_results(sample_doc, responses[0].text, plan_.mode)}};
}

double GenerationTaskEvaluation::aggregate_corpus(const std::string& metric, const std::vector<json>& values) const {
  std::vector<double> scores;
  scores.reserve(values.size());
  for (const auto& v : values) scores.push_back(v.at("score").get<double>());
  return mean_percent(scores);
}

json GenerationTaskEvaluation::cell_details(const json& setting) const {
  const auto it = cells_.find(setting.dump());
  if (it == cells_.end()) throw Error("task " + name() + ": no cell " + json_excerpt(setting) + " in its plan");
  return it->second.first;
}

std::string GenerationTaskEvaluation::cell_label(const json& setting) const {
  const auto it = cells_.find(setting.dump());
  return it == cells_.end() ? name() + " " + setting.dump() : it->second.second;
}

std::unique_ptr<harness::HarnessTask> GenerationTask::evaluation(const EvalContext& ctx,
                                                                std::shared_ptr<const Task> self) const {
  return std::make_unique<GenerationTaskEvaluation>(*this, ctx, std::move(self));
}

}  // namespace mnemo
