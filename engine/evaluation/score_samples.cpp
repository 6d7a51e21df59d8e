// `mnemo score --samples` (engine/evaluation/score.h): lm-eval's samples file (lm_eval/loggers/evaluation_tracker.py) back
// through the task's process_results (lm_eval/api/task.py) and the shared aggregation (tasks/harness/aggregation.h).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/harness_output.h"
#include "engine/io/checkpoint.h"
#include "engine/evaluation/score.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/harness/task_common.h"
#include "tasks/scoring.h"
#include "tasks/task.h"
#include "tasks/tokenizer.h"

namespace mnemo {

namespace {

// Stored and recomputed per-document values: equal as JSON, numbers by value (1 == 1.0), NaN == NaN (a NaN is
// written as null).
bool same_value(const json& stored, const json& recomputed) {
  if (stored.is_null() && recomputed.is_number_float()) return std::isnan(recomputed.get<double>());
  if (stored.is_number() && recomputed.is_number()) {
    const double a = stored.get<double>(), b = recomputed.get<double>();
    return a == b || (std::isnan(a) && std::isnan(b));
  }
  if (stored.is_array() && recomputed.is_array()) {
    if (stored.size() != recomputed.size()) return false;
    for (size_t i = 0; i < stored.size(); ++i)
      if (!same_value(stored[i], recomputed[i])) return false;
    return true;
  }
  if (stored.is_object() && recomputed.is_object()) {
    if (stored.size() != recomputed.size()) return false;
    for (auto it = recomputed.begin(); it != recomputed.end(); ++it)
      if (!stored.contains(it.key()) || !same_value(stored[it.key()], it.value())) return false;
    return true;
  }
  return stored == recomputed;
}

std::string clip(const std::string& s, size_t n = 120) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

// Why the line's arguments differ from the task's: the first request that differs.
std::string arguments_difference(const json& got, const json& want) {
  if (!got.is_object()) return "not an object";
  if (got.size() != want.size())
    return "it holds " + std::to_string(got.size()) + " requests, the task builds " + std::to_string(want.size());
  for (auto it = want.begin(); it != want.end(); ++it) {
    if (!got.contains(it.key())) return it.key() + " missing";
    if (got[it.key()] != it.value())
      return it.key() + " is " + clip(dump_line(got[it.key()])) + ", the task builds " + clip(dump_line(it.value()));
  }
  return "its keys differ";
}

// The task a samples file is re-scored with: an lm-eval task, or a token task drawn as eval --tasks drew it.
std::unique_ptr<harness::HarnessTask> samples_task(const std::string& task_name, const SamplesScoreOptions& o) {
  const auto& registry = TaskRegistry::instance();
  const std::string kind = registry.has(task_name) ? registry.at(task_name).evaluation : std::string();
  if (kind == "generate_until")
    throw Error("score: task " + task_name + " generates: re-score its predictions with --predictions FILE (the "
                "prediction rows `mnemo generate` and eval write)");
  if (kind == "token_logprobs")
    throw Error("score: task " + task_name + "'s documents are windows of its validation stream in the model's "
                "tokenizer: its samples are not re-scored without the evaluation (run eval --tasks again)");
  if (kind != "token_predictions") {
    if (!o.checkpoint.empty())
      throw Error("score: --checkpoint goes with a token task's samples (mqar, mad_*); task " + task_name +
                  " reads its documents from its data files");
    return harness::make_harness_task(task_name);  // an unknown name: Error with the close names
  }
  if (o.checkpoint.empty())
    throw Error("score: task " + task_name + " draws its documents with the run's task parameters and seed: give "
                "--checkpoint RUN, the checkpoint eval --tasks scored");
  // As eval --tasks: the checkpoint's parameters when it trained on the task, its seed and its number of test
  // examples (--limit keeps the first ones).
  const json cfg = load_checkpoint_config(resolve_model_path(o.checkpoint));
  return make_eval_task(task_name, cfg, HarnessEvalRequest{}.token_examples, nullptr);
}

}  // namespace

json score_samples(const std::string& task_name, const std::string& path, const SamplesScoreOptions& o) {
  if (std::filesystem::is_directory(path)) throw Error("score: samples file '" + path + "' is a directory");
  auto task = samples_task(task_name, o);
  if (o.cutting_context && (o.answer_length < 0 || o.context_length - o.answer_length < 1))
    throw Error("score: --context-length (" + std::to_string(o.context_length) + ") must exceed --answer-length (" +
                std::to_string(o.answer_length) + " >= 0)");
  const auto tok = load_tokenizer(o.tokenizer);
  harness::HarnessTaskContext ctx;
  ctx.tokenizer = tok.get();
  ctx.add_bos = tok->adds_bos();
  ctx.skip_malformed = o.skip_malformed;
  ctx.cutting_context = o.cutting_context;
  ctx.context_length = o.context_length;
  ctx.answer_length = o.answer_length;
  task->configure(ctx);
  std::ifstream in(path);
  if (!in) throw Error("score: cannot read samples file '" + path + "'");
  const int64_t num_docs = task->num_docs();
  std::map<int64_t, harness::MalformedRecord> malformed;
  for (auto& m : task->malformed_records()) malformed[m.doc_id] = m;
  const json files = task->data_files();
  const std::string data_file = files.empty() ? std::string() : files[0].value("file", std::string());
  const auto specs = task->metrics();
  std::map<std::string, std::vector<json>> values;
  std::map<int64_t, int64_t> seen;  // doc_id -> line
  std::string line;
  int64_t line_no = 0, n = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (strip(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json s;
    try {
      s = parse_json_text(line, "");
    } catch (const Error& e) {
      throw Error(where + ": not valid JSON: " + e.what());
    }
    if (!s.is_object()) throw Error(where + ": expected a JSON object (a line of lm-eval's samples schema)");
    const int64_t doc_id = harness::require_int(s, "doc_id", where);
    if (doc_id < 0 || doc_id >= num_docs)
      throw Error(where + ": field 'doc_id' = " + std::to_string(doc_id) + " is outside task " + task_name + "'s " +
                  std::to_string(num_docs) + " documents: a samples file of another task?");
    if (const auto it = seen.find(doc_id); it != seen.end())
      throw Error(where + ": field 'doc_id' = " + std::to_string(doc_id) + " repeats line " + std::to_string(it->second));
    seen[doc_id] = line_no;
    if (const auto it = malformed.find(doc_id); it != malformed.end())
      throw Error(where + ": field 'doc_id' = " + std::to_string(doc_id) + " is a malformed record of task " +
                  task_name + "'s data (" + it->second.where + ": " + it->second.reason + "), which has no document");
    const json doc = task->doc(doc_id);
    if (harness::require_field(s, "doc", where) != doc)
      throw Error(where + ": field 'doc' differs from document " + std::to_string(doc_id) + " of task " + task_name +
                  (data_file.empty() ? std::string() : " (" + data_file + ")") +
                  ": a samples file of another task, or of other data" +
                  (task->output_type() == "generate_until"
                       ? std::string(" (a recall task evaluated with --cutting-context: give score the same "
                                     "--cutting-context, --context-length, --answer-length and --tokenizer)")
                       : std::string()));
    const auto reqs = document_requests(*task, doc_id);
    if (reqs.empty())
      throw Error(where + ": field 'doc_id' = " + std::to_string(doc_id) + ": task " + task_name +
                  " makes no request for this document (skipped by its rule): a samples file of another evaluation");
    const json want_args = request_arguments(reqs);
    const json& args = harness::require_field(s, "arguments", where);
    if (args != want_args)
      throw Error(where + ": field 'arguments' differs from the requests task " + task_name + " builds for document " +
                  std::to_string(doc_id) + " (" + arguments_difference(args, want_args) +
                  "): a samples file of another task, or of other prompts");
    const auto responses = responses_from_resps(harness::require_field(s, "resps", where), reqs, where);
    const json m = task->process_results(doc, responses);
    for (const auto& spec : specs) {
      if (!m.contains(spec.name))
        throw Error("task " + task_name + ": process_results of document " + std::to_string(doc_id) + " has no '" +
                    spec.name + "'");
      const json& stored = harness::require_field(s, spec.name, where);
      if (!same_value(stored, m[spec.name]))
        throw Error(where + ": field '" + spec.name + "' = " + clip(dump_line(stored)) + " differs from the value " +
                    clip(dump_line(m[spec.name])) + " that process_results of task " + task_name +
                    " computes from this line's resps");
      values[spec.name].push_back(m[spec.name]);
    }
    ++n;
  }
  if (n == 0) throw Error("score: '" + path + "' holds no samples");
  std::string metric_names;
  for (const auto& spec : specs) metric_names += (metric_names.empty() ? "" : ", ") + spec.name;
  return {{"task", task_name},
          {"samples", path},
          {"n", n},
          {"results", results_entry(task_name, aggregate_metrics(specs, values, *task))},
          {"checked", "every line's doc and arguments equal task " + task_name + "'s document and requests for its "
                      "doc_id; the per-document " + metric_names + " recomputed from its resps equal the stored values"}};
}

}  // namespace mnemo
