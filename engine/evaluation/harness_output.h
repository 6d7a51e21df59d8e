// What the lm-eval-parity driver (engine/evaluation/harness_eval.h) writes and `mnemo score --samples`
// (engine/evaluation/score.h) reads back: a document's requests in lm-eval's order, the samples schema (lm_eval/loggers/
// evaluation_tracker.py: arguments as gen_args_i/arg_j, resps stringified by sanitize_list), the aggregated
// metrics of results.json and lm-eval's results table (lm_eval/utils.py make_table).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/request.h"

namespace mnemo {

std::string format_fixed(double v, int digits);  // printf("%.*f")
std::string dump_line(const json& j);            // one line, invalid UTF-8 replaced
void write_lines(const std::string& path, const std::vector<json>& lines);  // JSON lines, written atomically

// task.requests(doc_id) in lm-eval's instance order (by idx, stable); Error for a request with the wrong number
// of arguments (loglikelihood: 2; rolling, generate_until: 1; token_predictions: none, as many labels as ids).
std::vector<harness::Request> document_requests(const harness::HarnessTask& task, int64_t doc_id);

// lm-eval's "arguments" of a samples line: {"gen_args_i": {"arg_0": ..., "arg_1": ...}}; generate_until's arg_1 is
// {"until", "max_gen_toks"}; token_predictions' are its input_ids and labels.
json request_arguments(const std::vector<harness::Request>& reqs);

// One line of samples_<task>.jsonl (doc_id, doc, target, arguments, resps, filtered_resps, filter, metrics, the
// three hashes, then each metric's per-document value).
json sample_line(const harness::HarnessTask& t, int64_t doc_id, const json& doc,
                 const std::vector<harness::Request>& reqs, const std::vector<harness::Response>& resp,
                 const json& metrics);

// The responses a samples line's "resps" holds for `reqs` (what sample_line wrote, or lm-eval's own file):
// generate_until "text"; loglikelihood ["<float repr>", "True|False"]; rolling "<float repr>"; token_predictions
// {"predictions", "loss_sum", "n_labels"}. Errors name
// `where` ("file:line") and the field: not an array, a count other than reqs.size(), a value of the wrong shape.
std::vector<harness::Response> responses_from_resps(const json& resps, const std::vector<harness::Request>& reqs,
                                                    const std::string& where);

struct AggregatedMetric {
  harness::MetricSpec spec;
  double value = 0;
  double stderr_value = 0;  // NaN: lm-eval's "N/A" (its aggregation has none, or a single document)
};
// Each metric of `specs` over its per-document values (the shared aggregation, tasks/harness/aggregation.h; a
// "corpus" metric through task.aggregate_corpus, with no stderr).
std::vector<AggregatedMetric> aggregate_metrics(const std::vector<harness::MetricSpec>& specs,
                                                std::map<std::string, std::vector<json>>& values,
                                                const harness::HarnessTask& task);
// results.json's entry of a task: {"alias", "<metric>,none", "<metric>_stderr,none" (a number or "N/A")}.
json results_entry(const std::string& task, const std::vector<AggregatedMetric>& metrics);

// lm-eval's make_table (markdown) over results.json, tasks in `order`: Tasks | Version | Filter | n-shot | Metric |
// (↑/↓) | Value | (±) | Stderr, values %.4f, "N/A" stderr.
std::string harness_results_table(const json& results, const std::vector<std::string>& order);

}  // namespace mnemo
