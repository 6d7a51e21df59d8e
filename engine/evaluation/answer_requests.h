// The evaluation driver's answers (engine/evaluation/harness_eval.h run_harness): each request type through the model,
// as lm-eval's HFLM answers them, and the token tasks' token_predictions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tasks/harness/harness_task.h"
#include "tasks/harness/request.h"
#include "tasks/model_api.h"
#include "tasks/tokenizer.h"

namespace mnemo {

// The driver's options the answers follow (HarnessOptions' fields of the same names).
struct AnswerOptions {
  int64_t batch_size = 32;        // loglikelihood and token_logprobs requests per forward
  int64_t token_batch_size = 64;  // token_predictions requests per forward
  int64_t max_length = 2048;      // the model's context
  bool max_length_given = false;  // --max-length given: a continuation longer than it is an Error, not a raise
};

// One task's requests, per document in lm-eval's order, and what the progress lines say of them.
struct AnswerJob {
  const std::string& name;
  const harness::HarnessTask& task;  // its generation_policy
  const std::vector<std::vector<harness::Request>>& reqs;
  std::string documents;  // "N documents" and the skipped ones, for the first progress line
  int64_t n_requests = 0;
};

// Answers every request of a task: token_predictions and token_logprobs through engine/evaluation/token_eval.h (in
// document order), loglikelihood and rolling windows through loglikelihood_tokens (all of the task's windows in
// lm-eval's Collator order, sent in slices of whole batches so the batches equal one call's), generate_until through
// the shared engine/evaluation/generate_until.h, one by one.
// `tok` may be null when no request is text (an Error otherwise). max_length: the context, raised to the task's
// longest request when the default was too short (o.max_length_given: an Error instead). done_at[d]: the wall time (wall_seconds) at which document d's last answer came (0 without requests).
std::vector<std::vector<harness::Response>> answer_requests(EvalModel& model, const Tokenizer* tok, const AnswerJob& job,
                                                            bool add_bos, const AnswerOptions& o,
                                                            const std::function<void(const std::string&)>& log,
                                                            int64_t& max_length, std::vector<double>& done_at);

}  // namespace mnemo
