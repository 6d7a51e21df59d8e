// `mnemo score`: predictions made elsewhere, scored with the task's own scorer (found through the
// task registry; EvalTask::score_prediction), or an lm-eval samples file re-scored without the model.
#pragma once
#include <string>

#include "core/common.h"

namespace mnemo {

// {"task", "metric", "n", "value" (mean, in %)[, "mode"]}. Error for a task without a text scorer,
// an unreadable file, a malformed line (file:line and field), or no predictions.
json score_predictions(const std::string& task, const std::string& predictions_path, const std::string& mode);

// `mnemo score --task T --samples FILE`: a samples file of `mnemo eval --tasks T --log-samples` (lm-eval's samples
// schema) re-scored through the task's own process_results and the shared aggregation, without the model. T is an
// lm-eval task, or a token task (MQAR, MAD) with options.checkpoint; tasks made for the model (S-NIAH, BABILong: use
// --predictions; lm_ppl) are refused by name. Every
// line is checked against the task first: its doc_id names a document of the task, its "doc" equals that document
// and its "arguments" equal the requests the task builds for it (so a file of another task, or of other data, is
// refused at its first line); "resps" holds one response per request; and the per-document metric values stored
// in the line equal the recomputed ones. Returns {"task", "samples", "n", "results": {"alias", "<m>,none",
// "<m>_stderr,none", ...} (as results.json), "checked": "..."}. Errors name "file:line" and the field.
struct SamplesScoreOptions {
  bool skip_malformed = false;  // read the task's data as `eval --skip-malformed` read them
  // The recall tasks' --cutting-context as the evaluation ran it: the cut is made in the evaluation's tokens, so
  // the tokenizer is needed (BOS counted when it has one, as eval's default add_bos).
  bool cutting_context = false;
  int64_t context_length = 2048, answer_length = 48;
  std::string tokenizer = "byte";
  // A token task (MQAR, MAD): the checkpoint eval --tasks scored. Its task parameters (when it trained on the task)
  // and seed draw the documents, as eval drew them (make_eval_task); required for token tasks, refused otherwise.
  std::string checkpoint;
};
json score_samples(const std::string& task, const std::string& samples_path, const SamplesScoreOptions& options = {});

}  // namespace mnemo
