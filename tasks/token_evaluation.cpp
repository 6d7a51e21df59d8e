#include "tasks/token_evaluation.h"

#include <algorithm>
#include <cmath>

#include "tasks/scoring.h"

namespace mnemo {

using harness::Request;
using harness::RequestType;
using harness::Response;

TokenTaskEvaluation::TokenTaskEvaluation(std::shared_ptr<TokenTask> task, int64_t n, uint64_t seed)
    : task_(std::move(task)) {
  if (!task_) throw Error("token evaluation: no task");
  if (n < 1) throw Error("task " + task_->name() + ": the number of test examples must be >= 1, got " + std::to_string(n));
  examples_ = task_->examples(Split::test, n, seed);
  corpus_metrics_ = task_->test_metric_names();
}

std::vector<harness::MetricSpec> TokenTaskEvaluation::metrics() const {
  std::vector<harness::MetricSpec> specs = {{"accuracy", "mean", true}, {"loss", "weighted_mean", false}};
  for (const auto& m : corpus_metrics_) specs.push_back({m, harness::kCorpusAggregation, true});
  return specs;
}

json TokenTaskEvaluation::doc(int64_t doc_id) const {
  if (doc_id < 0 || doc_id >= num_docs())
    throw Error("task " + name() + ": document " + std::to_string(doc_id) + " is outside its " +
                std::to_string(num_docs()) + " test examples");
  const TokenExample& ex = examples_[static_cast<size_t>(doc_id)];
  json d = {{"doc_id", doc_id}, {"input_ids", ex.input_ids}, {"labels", ex.labels}};
  if (ex.meta.is_object())
    for (auto it = ex.meta.begin(); it != ex.meta.end(); ++it) d[it.key()] = it.value();
  return d;
}

// The labelled tokens, space-separated (what the model must predict).
std::string TokenTaskEvaluation::target(const json& doc) const {
  std::string out;
  for (const auto& l : doc.at("labels"))
    if (l.get<int64_t>() != kIgnoreLabel) out += (out.empty() ? "" : " ") + std::to_string(l.get<int64_t>());
  return out;
}

std::vector<Request> TokenTaskEvaluation::requests(int64_t doc_id) const {
  const TokenExample& ex = examples_.at(static_cast<size_t>(doc_id));
  if (std::none_of(ex.labels.begin(), ex.labels.end(), [](int64_t l) { return l != kIgnoreLabel; })) return {};
  Request r;
  r.type = RequestType::token_predictions;
  r.input_ids = ex.input_ids;
  r.labels = ex.labels;
  r.doc_id = doc_id;
  return {r};
}

json TokenTaskEvaluation::process_results(const json& doc, const std::vector<Response>& responses) const {
  if (responses.size() != 1)
    throw Error("task " + name() + ": " + std::to_string(responses.size()) + " responses for one token_predictions request");
  const Response& r = responses[0];
  const auto labels = doc.at("labels").get<std::vector<int64_t>>();
  json out = {{"accuracy", example_accuracy(r.predictions, labels)}, {"loss", json::array({r.loss_sum, r.n_labels})}};
  for (const auto& m : corpus_metrics_) out[m] = {{"doc_id", doc.at("doc_id")}, {"predictions", r.predictions}};
  return out;
}

// The task's test metric over the scored examples (document order), from each one's predictions.
double TokenTaskEvaluation::aggregate_corpus(const std::string& metric, const std::vector<json>& values) const {
  std::vector<TokenExample> test;
  std::vector<std::vector<int64_t>> predictions;
  for (const auto& v : values) {
    const int64_t d = v.at("doc_id").get<int64_t>();
    if (d < 0 || d >= num_docs()) throw Error("task " + name() + ": metric " + metric + " of an unknown document " + std::to_string(d));
    test.push_back(examples_[static_cast<size_t>(d)]);
    predictions.push_back(v.at("predictions").get<std::vector<int64_t>>());
  }
  const json m = task_->test_metrics_of(test, predictions);
  if (!m.contains(metric) || !m[metric].is_number())
    throw Error("task " + name() + ": its test metrics hold no number '" + metric + "' (" + json_excerpt(m) + ")");
  return m[metric].get<double>();
}

}  // namespace mnemo
