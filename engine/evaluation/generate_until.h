// The one generate_until of every evaluation (docs/tasks.md#evaluation-machinery): the lm-eval driver's generation
// requests (engine/evaluation/harness_eval.h: the recall tasks, and the generation tasks S-NIAH and BABILong through
// tasks/generation_evaluation.h) are answered here. lm-eval lm_eval/models/huggingface.py
// HFLM.generate_until: the context encoded (BOS first with add_bos), left-truncated to max_length - max_gen_toks,
// greedy decoding until EOS, any `until` string or max_gen_toks tokens, the text cut before the first `until`.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tasks/harness/request.h"
#include "tasks/model_api.h"
#include "tasks/tokenizer.h"

namespace mnemo {

struct GenerateUntilOptions {
  bool add_bos = true;                 // BOS (when the tokenizer has one) before the context
  std::optional<int64_t> max_length;  // unset: no truncation (S-NIAH/BABILong prompts are sized by the task)
  int64_t prefill_chunk = 0;           // prompt tokens per forward through the model's state (0 = at once)
  std::function<void(int64_t done)> progress;  // after each request; may be empty
};

// One text per request (in order), each request answered from the model's initial state. Errors: a request that
// is not generate_until or has no context argument, max_gen_toks that leaves no context within max_length.
std::vector<std::string> generate_until(EvalModel& model, const Tokenizer& tok,
                                        const std::vector<harness::Request>& requests,
                                        const GenerateUntilOptions& options);

}  // namespace mnemo
