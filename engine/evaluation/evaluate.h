// `mnemo eval`: a checkpoint on a task. Token tasks (MQAR, MAD) give loss + per-example accuracy on
// fresh test examples; generation tasks (S-NIAH, BABILong) and lm_ppl as the evaluation they make
// (EvalTask::evaluation), all through the one driver. One `evals` row per (metric, setting) lands in the results DB.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/defaults.h"
#include "results/db.h"
#include "tasks/eval_task.h"
#include "engine/evaluation/checkpoint_eval.h"
#include "tasks/tokenizer.h"

namespace mnemo {

struct EvalRequest {
  std::string checkpoint, task;  // task: empty = the one the model was trained on
  std::string db = kDefaultDbPath, device = "auto";
  int64_t n = 1000, batch_size = 64;
  bool n_given = false;
  uint64_t seed = 0;
  bool seed_given = false;
  json params = json::object();  // task parameters and evaluation options (lengths, depths, ...)
  bool keep_previous = false;    // keep earlier rows of the same cells (marked) instead of replacing them
  bool allow_other_tokenizer = false;  // a --tokenizer other than the checkpoint's (checkpoint_tokenizer)
};

// A generation task (S-NIAH, BABILong) on ctx.model through the evaluation driver (run_harness over
// GenerationTaskEvaluation: every cell of task.generation_plan(ctx), its requests through the shared generate_until,
// BOS first when the tokenizer has one, no truncation; each answer scored by task.process_results; a cell's value
// mean_percent of its scores); one EvalCell per cell (details: the plan's, "wall_s" and "samples", the
// process_results records) handed to ctx.record once all are done.
// Returns {"task", "metric", "tokenizer", "cells": [setting + "value", "n"]}.
json evaluate_generation_task(const GenerationTask& task, EvalContext& ctx);

// An evaluation task (EvalTask::evaluation) on ctx.model through the driver, `batch_size` token_logprobs requests per
// forward; the cells go to ctx.record. `tok` encodes text requests (null: none). Returns {"task", "metric" (the
// first), "cells": [setting + "value" (the first metric's) + "n" (+ each metric by name when there are several)]}, one
// entry per setting (rows beside the metrics, such as lm_ppl's per-bucket perplexity, are in the database only).
json evaluate_on_driver(std::unique_ptr<harness::HarnessTask> evaluation, const Tokenizer* tok, EvalContext& ctx,
                        int64_t batch_size);

// Returns the result JSON the CLI prints; progress lines go to `log` (may be empty).
json evaluate_checkpoint(const EvalRequest& request, const std::function<void(const std::string&)>& log);

}  // namespace mnemo
