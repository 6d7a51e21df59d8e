// The lm-eval-parity evaluation driver (engine/evaluation/harness_eval.h). References: EleutherAI/lm-evaluation-harness
// lm_eval/evaluator.py (evaluate: requests per document, process_results, logged samples), lm_eval/api/task.py
// (Instance), lm_eval/models/huggingface.py (loglikelihood_rolling, generate_until), lm_eval/loggers/
// evaluation_tracker.py (samples file: sanitize_list, gen_args_i/arg_j), lm_eval/utils.py (make_table).
#include "engine/evaluation/harness_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/signals.h"
#include "core/system_info.h"
#include "engine/io/checkpoint.h"
#include "engine/evaluation/answer_requests.h"
#include "engine/evaluation/checkpoint_eval.h"
#include "engine/evaluation/generate_until.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/evaluation/token_eval.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "results/db.h"
#include "runtime/device.h"
#include "tasks/harness/aggregation.h"
#include "tasks/harness/task_registry.h"
#include "tasks/harness/request.h"
#include "tasks/lm_task.h"
#include "tasks/generation_evaluation.h"
#include "tasks/token_evaluation.h"
#include "tasks/token_shard.h"

namespace mnemo {

namespace fs = std::filesystem;
using harness::Request;
using harness::RequestType;
using harness::Response;
using Log = std::function<void(const std::string&)>;

namespace {

// lm-eval keeps a YAML version (1.0) as a number, a class's VERSION = 0 as an integer; a string that is not a plain
// number stays a string ("default").
json version_value(const std::string& v) {
  char* end = nullptr;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (!v.empty() && end && *end == '\0') return json(static_cast<int64_t>(i));
  const double d = std::strtod(v.c_str(), &end);
  return (!v.empty() && end && *end == '\0') ? json(d) : json(v);
}

struct TaskWork {
  std::string name;
  std::unique_ptr<harness::HarnessTask> task;
  int64_t n_original = 0, n = 0, n_requests = 0, skipped = 0;  // skipped: documents without requests
  std::vector<std::vector<Request>> reqs;  // per document, in idx order (lm-eval sorts instances by idx)
  std::vector<harness::MalformedRecord> malformed;  // records skipped under --skip-malformed, doc_id < n
  std::vector<bool> is_malformed;                   // per document
};

// The documents [0, n) of the task (--limit), their requests; malformed records (--skip-malformed) have none.
void build_requests(TaskWork& w, const std::optional<int64_t>& limit) {
  w.n_original = w.task->num_docs();
  w.n = limit ? std::min(*limit, w.n_original) : w.n_original;
  w.is_malformed.assign(static_cast<size_t>(w.n), false);
  for (auto& m : w.task->malformed_records())
    if (m.doc_id >= 0 && m.doc_id < w.n) {
      w.is_malformed[static_cast<size_t>(m.doc_id)] = true;
      w.malformed.push_back(std::move(m));
    }
  w.reqs.resize(static_cast<size_t>(w.n));
  for (int64_t d = 0; d < w.n; ++d) {
    if (w.is_malformed[static_cast<size_t>(d)]) continue;
    auto r = document_requests(*w.task, d);
    w.n_requests += static_cast<int64_t>(r.size());
    if (r.empty()) ++w.skipped;
    w.reqs[static_cast<size_t>(d)] = std::move(r);
  }
}

// A document that is scored: neither malformed nor skipped by the task's rule.
bool scored(const TaskWork& w, int64_t d) {
  return !w.is_malformed[static_cast<size_t>(d)] && !w.reqs[static_cast<size_t>(d)].empty();
}

// " (3 skipped: the task's rule made no request for them)", " (2 malformed records skipped)", both, or "".
std::string skipped_note(const TaskWork& w) {
  std::string note;
  if (w.skipped > 0) note += " (" + std::to_string(w.skipped) + " skipped: the task's rule made no request for them)";
  if (!w.malformed.empty()) note += " (" + std::to_string(w.malformed.size()) + " malformed records skipped)";
  return note;
}

// {"skipped": N, "records": [{doc_id, where, reason}, ...]} of the malformed records skipped.
json malformed_json(const TaskWork& w) {
  json records = json::array();
  for (const auto& m : w.malformed) records.push_back(m.entry());
  return {{"skipped", static_cast<int64_t>(w.malformed.size())}, {"records", records}};
}

// The data files read although their SHA-256 differs from the reference copy's (--skip-malformed): their notes.
json modified_files(const json& data_files) {
  json notes = json::array();
  for (const auto& f : data_files)
    if (f.value("modified", false)) notes.push_back(f.value("file", "") + ": " + f.value("note", ""));
  return notes;
}


}  // namespace

namespace {

// Every option checked before any work: one error naming the option and its value.
void check_harness_options(const EvalModel* model, const HarnessOptions& o) {
  if (o.tasks.empty()) throw Error("eval: no tasks given (--tasks piqa,arc_easy,... or a group such as commonsense)");
  if (o.limit && *o.limit <= 0)
    throw Error("eval: --limit must be a positive number of documents, got " + std::to_string(*o.limit));
  if (o.batch_size < 1) throw Error("eval: --batch-size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.token_batch_size < 1) throw Error("eval: --batch-size must be >= 1, got " + std::to_string(o.token_batch_size));
  if (o.max_length < 1) throw Error("eval: --max-length must be >= 1, got " + std::to_string(o.max_length));
  if (o.output_path.empty() && (o.log_samples || o.requests_only))
    throw Error("eval: the output path is empty (--output-path DIR)");
  if (!model && !o.requests_only) throw Error("eval: no model to evaluate (a checkpoint, or --requests-only)");
  if (o.cutting_context && (o.answer_length < 0 || o.context_length - o.answer_length < 1))
    throw Error("eval: --context-length (" + std::to_string(o.context_length) + ") must exceed --answer-length (" +
                std::to_string(o.answer_length) + " >= 0): the cut keeps context_length - answer_length tokens");
}

// The tokenizer every text task needs, fitting the model; a token task's ids are its own (checked against the
// model's vocabulary instead).
void check_task_inputs(const EvalModel* model, const Tokenizer* tok, const std::vector<TaskWork>& works) {
  for (const auto& w : works) {
    if (auto* token = dynamic_cast<const TokenTaskEvaluation*>(w.task.get())) {
      if (model && token->task().vocab_size() > model->vocab_size())
        throw Error("task " + w.name + ": its vocab_size " + std::to_string(token->task().vocab_size()) +
                    " exceeds the model's " + std::to_string(model->vocab_size()));
      continue;
    }
    if (!w.task->uses_tokenizer()) continue;
    if (dynamic_cast<const GenerationTaskEvaluation*>(w.task.get())) continue;  // its plan checked its tokenizer
    if (!tok) throw Error("task " + w.name + " is text: give the evaluation a tokenizer (--tokenizer)");
    if (model && tok->vocab_size() != model->vocab_size())
      throw Error("tokenizer " + tok->id() + " has " + std::to_string(tok->vocab_size()) +
                  " tokens but the model's vocab_size is " + std::to_string(model->vocab_size()) +
                  " (evaluate with the tokenizer the model was trained with: --tokenizer)");
  }
}

// Every task built and configured first, so that an unknown name fails before any work.
std::vector<TaskWork> make_task_works(const Tokenizer* tok, const HarnessOptions& o, bool add_bos) {
  std::vector<TaskWork> works;
  for (const auto& name : o.tasks) {
    TaskWork w;
    w.name = name;
    w.task = o.make_task ? o.make_task(name) : harness::make_harness_task(name);
    if (!w.task) throw Error("eval: unknown task '" + name + "'");
    works.push_back(std::move(w));
  }
  harness::HarnessTaskContext task_ctx;
  task_ctx.tokenizer = tok;
  task_ctx.add_bos = add_bos;
  task_ctx.max_length = o.max_length;
  task_ctx.cutting_context = o.cutting_context;
  task_ctx.context_length = o.context_length;
  task_ctx.answer_length = o.answer_length;
  task_ctx.skip_malformed = o.skip_malformed;
  for (auto& w : works) w.task->configure(task_ctx);
  return works;
}

// --requests-only: <task>.jsonl, a line per scored document {"doc_id", "arguments"}; returns the files and the
// request counts.
std::pair<json, json> write_request_files(std::vector<TaskWork>& works, const HarnessOptions& o,
                                          const std::function<void(const TaskWork&)>& note_task,
                                          const std::function<void(const std::string&)>& log) {
  json files = json::array(), counts = json::object();
  for (auto& w : works) {
    build_requests(w, o.limit);
    std::vector<json> lines;
    for (int64_t d = 0; d < w.n; ++d) {
      if (!scored(w, d)) continue;  // skipped or malformed: no line (doc_ids keep their gaps)
      json args = json::array();
      for (const auto& r : w.reqs[static_cast<size_t>(d)]) args.push_back(r.arguments);
      lines.push_back({{"doc_id", d}, {"arguments", args}});
    }
    const std::string path = (fs::path(o.output_path) / (w.name + ".jsonl")).string();
    write_lines(path, lines);
    files.push_back(path);
    counts[w.name] = w.n_requests;
    note_task(w);
    if (log) log("[" + w.name + "] " + std::to_string(w.n_requests) + " requests of " + std::to_string(w.n) +
                 " documents" + skipped_note(w) + " -> " + path);
  }
  return {files, counts};
}

// The evals rows of one scored task: a cell per metric with its setting (what makes two values comparable) and its
// details (stderr, data files, versions, timing).
// A cell of a grid task (HarnessTask::doc_setting): its documents' values aggregated apart.
struct GridCell {
  json setting;
  std::vector<AggregatedMetric> aggregated;
  std::map<std::string, std::vector<json>> values;  // per metric, the documents' values ("samples")
  std::vector<json> results;                        // the documents' process_results (HarnessTask::cell_summary)
  int64_t n = 0;
  double wall_s = 0;
};
struct TaskScore {
  std::vector<AggregatedMetric> aggregated;
  int64_t n_scored = 0, max_length = 0;
  double wall_s = 0;
  json data_files;
  std::vector<GridCell> grid;  // empty: the task is one cell
};
std::vector<EvalCell> task_cells(const TaskWork& w, const TaskScore& t, const Tokenizer* tok, const HarnessOptions& o,
                                 bool add_bos, const json& sys) {
  const json limit_json = o.limit ? json(*o.limit) : json(nullptr);
  std::vector<EvalCell> cells;
  for (const GridCell& g : t.grid) {
    const harness::CellSummary summary = w.task->cell_summary(g.setting, g.results);
    for (const auto& a : g.aggregated) {
      EvalCell c;
      c.task = w.name;
      c.metric = a.spec.name;
      c.value = a.value;
      c.n = g.n;
      c.setting = g.setting;
      c.details = w.task->cell_details(g.setting);
      c.details.update(summary.details);
      c.details["wall_s"] = g.wall_s;
      c.details["samples"] = g.values.at(a.spec.name);
      c.details.update(o.record_details);
      cells.push_back(std::move(c));
    }
    for (const harness::CellRow& row : summary.rows) {
      EvalCell c;
      c.task = w.name;
      c.metric = row.metric;
      c.value = row.value;
      c.n = row.n;
      c.setting = row.setting;
      c.details = row.details;
      c.details.update(o.record_details);
      cells.push_back(std::move(c));
    }
  }
  if (!t.grid.empty()) return cells;
  for (const auto& a : t.aggregated) {
    const auto& s = a.spec;
    const double se = a.stderr_value;
    EvalCell c;
    c.task = w.name;
    c.metric = s.name;
    c.value = a.value;
    c.n = t.n_scored;
    c.setting = {{"suite", "lm-eval"}, {"num_fewshot", 0}, {"limit", limit_json}, {"max_length", t.max_length},
                 {"add_bos", add_bos}, {"version", w.task->version()}};
    if (o.cutting_context)
      c.setting.update({{"cutting_context", true}, {"context_length", o.context_length},
                        {"answer_length", o.answer_length}});
    if (const json own = w.task->cell_setting(); !own.is_null()) c.setting = own;  // e.g. a token task's parameters
    c.details = {{"stderr", std::isfinite(se) ? json(se) : json(nullptr)},
                 {"aggregation", s.aggregation},
                 {"higher_is_better", s.higher_is_better},
                 {"tokenizer", w.task->uses_tokenizer() && tok ? json(tok->id()) : json(nullptr)},
                 {"data_files", t.data_files},
                 {"batch_size", w.task->output_type() == "token_predictions" ? o.token_batch_size : o.batch_size},
                 {"wall_s", t.wall_s},
                 {"requests", w.n_requests},
                 {"docs_total", w.n_original},
                 {"docs_skipped", w.skipped},
                 {"malformed_skipped", static_cast<int64_t>(w.malformed.size())},
                 {"mnemo_version", sys.value("mnemo", "")},
                 {"git_commit", git_commit()},
                 {"torch_version", torch_version()},
                 {"device", o.device},
                 {"output_path", o.output_path}};
    if (!w.malformed.empty()) c.details["malformed_records"] = malformed_json(w)["records"];
    c.details.update(o.record_details);
    cells.push_back(std::move(c));
  }
  return cells;
}

// One task scored: its requests answered by the model, lm-eval's process_results per document, the aggregated
// metrics with their stderrs, and (--log-samples) the samples' lines.
struct ScoredTask {
  TaskScore score;
  json results;               // results.json's entry ("acc,none", "acc_stderr,none", ...)
  std::vector<json> samples;  // samples_<task>.jsonl lines
};
ScoredTask score_task(EvalModel& model, const Tokenizer* tok, TaskWork& w, bool add_bos, const HarnessOptions& o,
                      const Log& log) {
  const double t0 = wall_seconds();
  build_requests(w, o.limit);
  const int64_t n_scored = w.n - w.skipped - static_cast<int64_t>(w.malformed.size());
  if (n_scored == 0)
    throw Error("task " + w.name + ": every one of its " + std::to_string(w.n) + " documents was skipped (" +
                std::to_string(w.skipped) + " without requests, " + std::to_string(w.malformed.size()) +
                " malformed records): nothing to score");
  if (stop_requested()) throw Error(std::string("interrupted by ") + stop_signal_name() + " before task " + w.name);
  int64_t task_max_length = o.max_length;  // raised for this task when a continuation needs it (answer)
  std::vector<double> done_at;
  const AnswerJob job{w.name, *w.task, w.reqs,
                      std::to_string(w.n) + " documents" + skipped_note(w), w.n_requests};
  const AnswerOptions answer_options{o.batch_size, o.token_batch_size, o.max_length, o.max_length_given};
  const auto resp = answer_requests(model, tok, job, add_bos, answer_options, log, task_max_length, done_at);
  const auto specs = w.task->metrics();
  std::map<std::string, std::vector<json>> values;
  ScoredTask out;
  std::map<std::string, size_t> grid_index;  // setting.dump() -> index in out.score.grid
  for (int64_t d = 0; d < w.n; ++d) {
    if (!scored(w, d)) continue;
    const json doc = w.task->doc(d);
    const json m = w.task->process_results(doc, resp[static_cast<size_t>(d)]);
    if (!m.is_object()) throw Error("task " + w.name + ": process_results of document " + std::to_string(d) +
                                    " is not an object: " + dump_line(m));
    const json setting = w.task->doc_setting(doc);
    GridCell* cell = nullptr;
    if (!setting.is_null()) {
      const auto [it, added] = grid_index.emplace(setting.dump(), out.score.grid.size());
      if (added) out.score.grid.push_back({setting});
      cell = &out.score.grid[it->second];
      ++cell->n;
      // A cell's time: from the previous cell's last answer (or the task's start) to its own last answer.
      cell->wall_s = std::max(cell->wall_s, done_at[static_cast<size_t>(d)]);
    }
    for (const auto& s : specs) {
      if (!m.contains(s.name))
        throw Error("task " + w.name + ": process_results of document " + std::to_string(d) + " has no '" + s.name +
                    "'");
      values[s.name].push_back(m[s.name]);
      if (cell) cell->values[s.name].push_back(m[s.name]);
    }
    if (cell) cell->results.push_back(m);
    if (o.log_samples) out.samples.push_back(sample_line(*w.task, d, doc, w.reqs[static_cast<size_t>(d)],
                                                         resp[static_cast<size_t>(d)], m));
  }
  out.score.aggregated = aggregate_metrics(specs, values, *w.task);
  double previous_end = t0;
  for (GridCell& g : out.score.grid) {
    g.aggregated = aggregate_metrics(specs, g.values, *w.task);
    const double end = g.wall_s;
    g.wall_s = std::max(0.0, end - previous_end);
    previous_end = std::max(previous_end, end);
    if (log)
      for (const auto& a : g.aggregated) log(w.task->cell_label(g.setting) + ": " + a.spec.name + " " + std::to_string(a.value));
  }
  out.score.n_scored = n_scored;
  out.score.max_length = task_max_length;
  out.score.wall_s = wall_seconds() - t0;
  out.score.data_files = w.task->data_files();
  out.results = results_entry(w.name, out.score.aggregated);
  return out;
}

// results.json before any task: lm-eval's top-level keys and the evaluation's configuration.
json results_skeleton(const Tokenizer* tok, const HarnessOptions& o, bool add_bos) {
  const json limit_json = o.limit ? json(*o.limit) : json(nullptr);
  json out = {{"results", json::object()},  {"group_subtasks", json::object()}, {"configs", json::object()},
              {"versions", json::object()}, {"n-shot", json::object()},         {"higher_is_better", json::object()},
              {"n-samples", json::object()}, {"data_files", json::object()}};
  out["config"] = {{"model", o.model_name},  {"model_args", "checkpoint=" + o.checkpoint},
                   {"checkpoint", o.checkpoint}, {"tokenizer", tok ? json(tok->id()) : json(nullptr)}, {"add_bos", add_bos},
                   {"max_length", o.max_length}, {"limit", limit_json}, {"batch_size", o.batch_size},
                   {"token_batch_size", o.token_batch_size},
                   {"bootstrap_iters", 100000}, {"device", o.device}, {"num_fewshot", 0},
                   {"cutting_context", o.cutting_context}, {"context_length", o.context_length},
                   {"answer_length", o.answer_length}, {"skip_malformed", o.skip_malformed}};
  return out;
}

// A scored task's entries in results.json (results, configs, versions, n-shot, higher_is_better, n-samples, ...).
void add_task_results(json& out, const TaskWork& w, const ScoredTask& t, const HarnessOptions& o) {
  json hib = json::object(), metric_list = json::array();
  for (const auto& a : t.score.aggregated) {
    hib[a.spec.name] = a.spec.higher_is_better;
    metric_list.push_back({{"metric", a.spec.name}, {"aggregation", a.spec.aggregation},
                           {"higher_is_better", a.spec.higher_is_better}});
  }
  out["results"][w.name] = t.results;
  out["group_subtasks"][w.name] = json::array();
  out["configs"][w.name] = {{"task", w.name}, {"output_type", w.task->output_type()}, {"num_fewshot", 0},
                            {"metric_list", metric_list}, {"metadata", {{"version", version_value(w.task->version())}}}};
  out["versions"][w.name] = version_value(w.task->version());
  out["n-shot"][w.name] = 0;
  out["higher_is_better"][w.name] = hib;
  out["n-samples"][w.name] = {{"original", w.n_original}, {"effective", w.n}, {"skipped", w.skipped}};
  if (o.skip_malformed) {
    out["n-samples"][w.name]["malformed"] = static_cast<int64_t>(w.malformed.size());
    out["malformed_records"][w.name] = malformed_json(w)["records"];
  }
  out["data_files"][w.name] = t.score.data_files;
}

// results.json's closing keys: the code's commit and version, the date, the whole evaluation's time.
void finish_results(json& out, const json& sys, double t_start) {
  out["git_hash"] = git_commit();
  out["date"] = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch()).count()) / 1000.0;
  out["mnemo_version"] = sys.value("mnemo", "");
  out["torch_version"] = torch_version();
  out["total_evaluation_time_seconds"] = format_fixed(wall_seconds() - t_start, 3);
}

// All or nothing: the samples, results.json, then the database rows (one transaction); a failure removes the files
// this evaluation wrote, so that no results stand without their rows. Returns the files written, results.json first.
json write_outputs(const json& out, const std::vector<std::pair<std::string, std::vector<json>>>& samples,
                   const std::vector<EvalCell>& cells, const HarnessOptions& o) {
  const std::string results_path = (fs::path(o.output_path) / "results.json").string();
  json files = json::array();
  std::vector<std::string> written;
  try {
    for (const auto& [path, lines] : samples) {
      write_lines(path, lines);
      written.push_back(path);
      files.push_back(path);
    }
    if (!o.output_path.empty()) {  // no folder: the database rows alone (`mnemo eval --task`)
      write_file_atomic(results_path, out.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
      written.push_back(results_path);
      files.insert(files.begin(), results_path);
    }
    if (o.record) o.record(cells);
  } catch (...) {
    std::error_code ec;
    for (const auto& path : written) fs::remove(path, ec);
    if (!o.output_path.empty()) fs::remove(o.output_path, ec);  // only if this left it empty
    throw;
  }
  return files;
}

}  // namespace

json run_harness(EvalModel* model, const Tokenizer* tok, const HarnessOptions& o, std::function<void(const std::string&)> log) {
  check_harness_options(model, o);
  const bool add_bos = tok ? o.add_bos.value_or(tok->adds_bos()) : false;
  std::vector<TaskWork> works = make_task_works(tok, o, add_bos);
  check_task_inputs(o.requests_only ? nullptr : model, tok, works);
  json skipped = json::object(), malformed = json::object(), data_warnings = json::object();
  // What run_harness returns beside its own keys: skipped documents, malformed records, modified data files.
  auto note_task = [&](const TaskWork& w) {
    skipped[w.name] = w.skipped;
    if (!w.malformed.empty()) malformed[w.name] = malformed_json(w);
    const json modified = modified_files(w.task->data_files());
    if (!modified.empty()) data_warnings[w.name] = modified;
    if (log && !w.malformed.empty()) {
      std::string line = "[" + w.name + "] " + std::to_string(w.malformed.size()) + " malformed records skipped (--skip-malformed):";
      for (const auto& m : w.malformed) line += " " + m.where + " (" + m.reason + ")";
      log(line);
    }
  };
  // The output folder is made by the first file written into it (core/atomic_file.h), once every input is validated
  // and every task scored: a failed evaluation leaves no empty folder behind.
  if (o.requests_only) {
    const auto [request_files, counts] = write_request_files(works, o, note_task, log);
    return {{"requests_only", true}, {"files", request_files}, {"requests", counts}, {"skipped", skipped},
            {"malformed", malformed},  {"data_warnings", data_warnings}, {"output_path", o.output_path}};
  }

  const double t_start = wall_seconds();
  const json sys = system_json();
  json out = results_skeleton(tok, o, add_bos);
  std::vector<std::pair<std::string, std::vector<json>>> pending_samples;  // (path, lines) per task
  std::vector<EvalCell> pending_cells;
  for (auto& w : works) {
    ScoredTask t = score_task(*model, tok, w, add_bos, o, log);
    add_task_results(out, w, t, o);
    note_task(w);
    // Written once every task is scored: an error or a stop request in a later task leaves nothing of this one.
    if (o.log_samples)
      pending_samples.emplace_back((fs::path(o.output_path) / ("samples_" + w.name + ".jsonl")).string(),
                                   std::move(t.samples));
    std::vector<EvalCell> cells = task_cells(w, t.score, tok, o, add_bos, sys);
    pending_cells.insert(pending_cells.end(), std::make_move_iterator(cells.begin()),
                         std::make_move_iterator(cells.end()));
    if (log) {
      std::string line = "[" + w.name + "] done in " + format_fixed(t.score.wall_s, 1) + " s:";
      for (const auto& a : t.score.aggregated)
        line += " " + a.spec.name + " " + format_fixed(t.results.at(a.spec.name + ",none").get<double>(), 4);
      log(line + skipped_note(w));
    }
  }
  finish_results(out, sys, t_start);
  const json files = write_outputs(out, pending_samples, pending_cells, o);
  return {{"results", out},         {"table", harness_results_table(out, o.tasks)}, {"files", files},
          {"skipped", skipped},     {"malformed", malformed},  {"data_warnings", data_warnings},
          {"output_path", o.output_path}};
}

}  // namespace mnemo
