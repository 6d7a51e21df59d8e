// Greedy generation (docs/tasks.md#evaluation-machinery generate_until, docs/models.md#conventions): each request starts from the model's
// initial state, the prompt is prefilled through a ModelState (recurrent state / KV cache), then
// tokens are decoded one at a time, feeding back the argmax.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/model.h"

namespace mnemo {

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these (it is dropped)
  // Optional: called with the tokens generated so far (stop ids excluded); true ends generation
  // (used for stop strings such as "\n").
  std::function<bool(const std::vector<int64_t>&)> should_stop;
  // Prefill in chunks of this many tokens through the state (0 = the whole prompt at once); the
  // Mixer contract makes chunked prefill equal to one pass, and it bounds activation memory.
  int64_t prefill_chunk = 0;
};

// Greedy continuation of prompt_ids (non-empty). Returns the new tokens, without a stop id.
// Runs under NoGradGuard with the model in eval mode (restores the previous training flag).
std::vector<int64_t> greedy_generate(LanguageModelImpl& model, const std::vector<int64_t>& prompt_ids,
                                     const GenerationOptions& options, const torch::Device& device);

// Convenience form of the above (the signature the evaluators use).
std::vector<int64_t> greedy_generate(LanguageModelImpl& model, const std::vector<int64_t>& prompt_ids,
                                     int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                     const torch::Device& device);

}  // namespace mnemo
