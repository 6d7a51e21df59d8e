// The evaluation driver at lm-eval parity (docs/tasks.md#evaluation-machinery, docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext):
// tasks build requests (tasks/harness/request.h: lm-eval's three types from strings, which the driver encodes, and
// the token tasks' token_predictions from ids), the driver asks the model (EvalModel::loglikelihood_tokens,
// generate_greedy, logits), hands each document's responses to process_results and aggregates
// (tasks/harness/aggregation.h). Token tasks (MQAR, MAD) enter as TokenTaskEvaluation (tasks/token_evaluation.h).
// Outputs as lm-eval's (lm_eval/evaluator.py simple_evaluate/evaluate, lm_eval/loggers/evaluation_tracker.py,
// lm_eval/utils.py make_table): <output_path>/results.json, samples_<task>.jsonl with --log-samples, the results table;
// one `evals` row per (task, metric).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/defaults.h"
#include "engine/evaluation/harness_output.h"
#include "tasks/eval_task.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/model_api.h"
#include "tasks/tokenizer.h"

namespace mnemo {

struct HarnessOptions {
  std::vector<std::string> tasks;  // task names (groups already expanded: harness::expand_harness_tasks)
  std::optional<int64_t> limit;    // unset = every document; N > 0 = the first N; N <= 0 is an Error
  int64_t batch_size = 32;
  int64_t token_batch_size = 64;   // token_predictions requests (MQAR, MAD) per forward
  int64_t max_length = 2048;       // the model's context: longer requests keep their last max_length tokens
  // false (a default, e.g. the checkpoint's seq_len): a task whose loglikelihood continuation exceeds max_length is
  // scored with max_length raised to its longest request (every mnemo model runs past its trained context); true
  // (--max-length given): such a request is an Error naming the task and document.
  bool max_length_given = false;
  std::optional<bool> add_bos;     // unset = the tokenizer has a BOS (docs/tasks.md#evaluation-machinery)
  bool log_samples = false;
  // Folder of results.json / samples_<task>.jsonl / <task>.jsonl (requests_only); empty = no files, the cells go to
  // `record` alone (`mnemo eval --task`).
  std::string output_path;
  bool requests_only = false;      // write the requests and stop (no model needed)
  // The recall tasks' context cutting (docs/tasks.md#recall-intensive-qa; the Based lm-eval fork's --cutting_context
  // --context_length --answer_length; these defaults are MoM's command). Other tasks ignore it.
  bool cutting_context = false;
  int64_t context_length = 2048, answer_length = 48;
  // --skip-malformed: a malformed record of a task's data file is skipped (counted, listed in results.json
  // "malformed_records" and the cells' details, its doc_id left unused) instead of being the error, and a data
  // file whose SHA-256 differs from the reference copy's is read and flagged matches_reference = false.
  bool skip_malformed = false;
  // For the record (results.json "config", evals rows).
  std::string model_name, checkpoint, device;
  // Receives each task's cells (one per metric) once the task is done; may be empty.
  std::function<void(const std::vector<EvalCell>&)> record;
  json record_details = json::object();  // merged into every cell's details (e.g. the checkpoint's config_hash)
  // Task factory; empty = harness::make_harness_task (tests inject their own tasks).
  std::function<std::unique_ptr<harness::HarnessTask>(const std::string&)> make_task;
};

// Runs every task of `o` on `model` (null: requests_only). Returns {"results": <results.json>, "table": <markdown>,
// "files": [written paths], "skipped": {task: n}, "malformed": {task: {"skipped", "records"}}, "data_warnings":
// {task: [notes of modified data files]}} or, with requests_only, {"requests_only": true, "files", "requests":
// {task: n}, "skipped", "malformed", "data_warnings"}. A document for which the task makes no request is skipped
// (the recall tasks' rule): counted in results.json "n-samples" and the log, not scored, not in the samples;
// malformed records (skip_malformed) likewise, counted apart.
// Progress lines (task, requests done / total, requests/s, ETA) go to `log` (may be empty). Errors: limit <= 0, an
// unknown task (the factory's Error), a tokenizer whose vocabulary differs from the model's, bad batch/max_length.
// `tok` may be null when every task is a token task (TokenTaskEvaluation: ids in the task's own vocabulary).
json run_harness(EvalModel* model, const Tokenizer* tok, const HarnessOptions& o,
                 std::function<void(const std::string&)> log);
inline json run_harness(EvalModel* model, const Tokenizer& tok, const HarnessOptions& o,
                        std::function<void(const std::string&)> log) {
  return run_harness(model, &tok, o, std::move(log));
}

// `mnemo eval --tasks ...` on a checkpoint (or without one for --requests-only).
struct HarnessEvalRequest {
  std::string checkpoint;  // empty only with options.requests_only
  std::string tokenizer;   // spec; empty = the checkpoint's config `tokenizer` ("byte" without a checkpoint)
  std::string db = kDefaultDbPath, device = "auto";
  std::optional<int64_t> max_length;  // unset = the checkpoint's seq_len, else 2048
  bool keep_previous = false;         // keep earlier evals rows of the same cells
  bool allow_other_tokenizer = false; // a --tokenizer other than the checkpoint's (checkpoint_tokenizer, evaluate.h)
  // Unset = 1 on the CPU, 32 on CUDA. On the CPU one request at a time is the fastest (measured 2026-11-26, tiny Gated
  // DeltaNet, 2 threads: PIQA 384 vs 284 requests/s at batch 1 vs 32, WikiText 35.4 vs 14.6): the forward is
  // already compute-bound at batch 1 and larger batches leave the caches.
  std::optional<int64_t> batch_size;
  int64_t token_examples = 1000;  // test examples of a token task (MQAR, MAD), drawn with the checkpoint's seed
  HarnessOptions options;  // tasks may hold groups and comma lists; output_path empty = the default; batch_size
                           // is replaced by the batch_size above (or its default)
};

// Task names and groups (comma lists allowed) to the tasks of one evaluation: lm-eval tasks and groups
// (harness::expand_harness_tasks), the token tasks of the task registry (MQAR, MAD: TokenTaskEvaluation), its
// generation tasks (S-NIAH, BABILong: GenerationTaskEvaluation) and lm_ppl (LmPplEvaluation).
std::vector<std::string> expand_eval_tasks(const std::vector<std::string>& names_or_groups);
// The evaluation task of `name`: a token task with the checkpoint's parameters when it trained on it (else the
// task's defaults) and `token_examples` test examples; a task that makes its evaluation for the model (S-NIAH,
// BABILong, lm_ppl: EvalTask::evaluation, with the checkpoint's parameters likewise, planned on `model_context`: its
// model, tokenizer and options); or the lm-eval task.
std::unique_ptr<harness::HarnessTask> make_eval_task(const std::string& name, const json& checkpoint_config,
                                                     int64_t token_examples, EvalContext* model_context);

// Default output folder: out/eval/<checkpoint's run folder name> (out/eval/requests without a checkpoint).
std::string default_harness_output_path(const std::string& checkpoint);

// Loads the checkpoint and its tokenizer (Error when the vocabularies differ, naming both), resolves the defaults,
// ties the evals rows to the checkpoint's run (replacing a cell's earlier rows unless keep_previous) and runs
// run_harness. The returned JSON also carries "run_id".
json evaluate_harness(const HarnessEvalRequest& request, const std::function<void(const std::string&)>& log);

}  // namespace mnemo
