// The evaluation task API (the one driver: engine/evaluation/harness_eval.h). Zero-shot tasks at lm-eval parity (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext): a task = documents + the requests of a
// document + process_results(doc, responses) -> per-document metric values; aggregation and standard errors
// exist once (tasks/harness/aggregation.h). Most tasks are data: a JSON task spec read by one generic
// multiple-choice task (tasks/harness/multiple_choice.cpp); code only where lm-eval's preprocessing needs it
// (HellaSwag preprocess, WinoGrande partial scoring, BoolQ, LAMBADA, WikiText).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/harness/request.h"

namespace mnemo::harness {

// What a task may need from the evaluation before it builds requests (run_harness calls configure once per task,
// before the first request): the evaluation's tokenizer (the recall tasks cut contexts in its tokens) and options.
struct HarnessTaskContext {
  const Tokenizer* tokenizer = nullptr;
  bool add_bos = false;          // the driver prepends BOS to every request
  int64_t max_length = 2048;
  bool cutting_context = false;  // the recall tasks' truncate_context (docs/tasks.md#recall-intensive-qa)
  int64_t context_length = 2048, answer_length = 48;
  // `mnemo eval --skip-malformed`: a malformed record of the data file is skipped (HarnessTask::malformed_records)
  // instead of being an Error, and a data file whose SHA-256 differs from the reference copy's is read, flagged
  // matches_reference = false, instead of refused.
  bool skip_malformed = false;
};

// A record of a task's data file that could not be read, skipped under skip_malformed. Its doc_id (the record's
// 0-based index among the file's records, as without the flag) stays unused: the documents after it keep theirs.
struct MalformedRecord {
  int64_t doc_id = 0;
  std::string where;   // "eval/piqa/valid.jsonl:17"
  std::string reason;  // "field 'goal' missing"
  json entry() const { return {{"doc_id", doc_id}, {"where", where}, {"reason", reason}}; }
};

// The aggregation of a metric that only the task can compute over all of its documents at once
// (HarnessTask::aggregate_corpus; lm-eval's corpus-level metrics such as F1 over a whole set).
inline constexpr const char* kCorpusAggregation = "corpus";

// How the driver answers a task's generate_until requests.
struct GenerationPolicy {
  bool truncate = true;       // contexts left-truncated to max_length - max_gen_toks (lm-eval); false: the task sized them
  int64_t prefill_chunk = 0;  // prompt tokens per forward through the model's state (0 = the whole prompt at once)
};

struct MetricSpec {
  std::string name;         // "acc", "acc_norm", "perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"
  std::string aggregation;  // "mean", "perplexity", "weighted_perplexity", "bits_per_byte", "corpus", ...
  bool higher_is_better = true;
};

// What a grid cell reports beyond its metrics' aggregates (HarnessTask::cell_summary): details computed from its
// documents, and further rows that are not one value per document (lm_ppl: perplexity per position bucket).
struct CellRow {
  std::string metric;
  json setting;
  double value = 0;
  int64_t n = 0;
  json details = json::object();
};
struct CellSummary {
  json details = json::object();  // merged into the details of each of the cell's metric rows
  std::vector<CellRow> rows;
};

class HarnessTask {
 public:
  virtual ~HarnessTask() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;       // lm-eval's task version, e.g. "1.0"
  virtual std::string output_type() const = 0;   // "multiple_choice", "loglikelihood", "loglikelihood_rolling", ...
  virtual std::vector<MetricSpec> metrics() const = 0;
  // Documents of the evaluation split, loaded on first use from the data directory; a missing file or a
  // wrong checksum names the file and what is expected; a malformed record names file:line and the field.
  virtual int64_t num_docs() const = 0;
  virtual json doc(int64_t doc_id) const = 0;     // the document after the task's preprocessing
  virtual std::string target(const json& doc) const = 0;  // lm-eval's `target` field of the samples schema
  // No requests = the document is skipped (the recall tasks' rule): the driver counts it and does not score it.
  virtual std::vector<Request> requests(int64_t doc_id) const = 0;
  // Per-document values of every metric (lm-eval process_results); for weighted_perplexity / bits_per_byte
  // a metric's value is [loglikelihood, weight] (words or bytes), as lm-eval keeps them.
  virtual json process_results(const json& doc, const std::vector<Response>& responses) const = 0;
  // Data files read, with their SHA-256, and whether they equal lm-eval's copies (MANIFEST): {"file", "sha256",
  // "matches_reference": bool, "note": "..."}.
  virtual json data_files() const = 0;
  // Called once before the documents are read (run_harness, score_samples); tasks keep what they need.
  virtual void configure(const HarnessTaskContext&) {}
  // The records skipped as malformed (configured with skip_malformed; empty otherwise), by doc_id. Their doc_ids
  // count in num_docs(); doc() and requests() of one are Errors naming the record.
  virtual std::vector<MalformedRecord> malformed_records() const { return {}; }
  // A "corpus" metric over the per-document values process_results gave it, in document order.
  virtual double aggregate_corpus(const std::string& metric, const std::vector<json>& values) const {
    throw Error("task " + name() + ": metric " + metric + " has no corpus aggregation");
  }
  // The setting of the task's evals rows (what makes two values comparable); null = the driver's lm-eval setting
  // (suite, num_fewshot, limit, max_length, add_bos, version).
  virtual json cell_setting() const { return nullptr; }
  // Whether the requests are text the driver encodes with the evaluation's tokenizer (every request type but
  // token_predictions, whose ids the task made in its own vocabulary).
  virtual bool uses_tokenizer() const { return true; }
  virtual GenerationPolicy generation_policy() const { return {}; }
  // The tokenizer the task made its documents with when it brings its own (a generation plan's, lm_ppl's validation
  // stream); null: the task uses the evaluation's.
  virtual std::shared_ptr<Tokenizer> own_tokenizer() const { return nullptr; }
  // A task whose documents fall into the cells of a settings grid (S-NIAH: length x depth): the cell of a document.
  // The driver then aggregates and records every cell apart (in the order the cells first appear), each with its
  // setting, cell_details(setting) plus "wall_s" and "samples" (the documents' values of the metric), and logs
  // "<cell_label>: <metric> <value>". null (every document): one cell, the driver's lm-eval setting and details.
  virtual json doc_setting(const json& doc) const { return nullptr; }
  virtual json cell_details(const json& setting) const { return json::object(); }
  virtual std::string cell_label(const json& setting) const { return name() + " " + setting.dump(); }
  // A grid cell's summary from its documents' process_results (in document order).
  virtual CellSummary cell_summary(const json& setting, const std::vector<json>& results) const { return {}; }
};

// The registry of these tasks (names, groups, construction): tasks/harness/task_registry.h.

}  // namespace mnemo::harness
