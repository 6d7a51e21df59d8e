// The model as the evaluator sees it (lm-eval's `LM`): tasks send it requests and never reach
// into the model runtime. engine/evaluation/model_adapter.h implements it for a runtime LanguageModel.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace mnemo {

// generate_until, greedy (docs/tasks.md#evaluation-machinery).
struct GenerationRequest {
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these (it is dropped)
  // Called with the tokens generated so far (stop ids excluded); true ends generation (stop strings).
  std::function<bool(const std::vector<int64_t>&)> should_stop;
  int64_t prefill_chunk = 0;  // prefill the prompt this many tokens at a time through the state (0 = at once)
};

class EvalModel {
 public:
  virtual ~EvalModel() = default;
  virtual int64_t vocab_size() const = 0;
  virtual torch::Device device() const = 0;
  // [B, T] int64 ids -> [B, T, V] logits, in eval mode without gradients.
  virtual torch::Tensor logits(const torch::Tensor& input_ids) = 0;
  // Log-probabilities of ids[:, t+1] given ids[:, :t+1]: [B, T] int64 -> [B, T-1], in eval mode
  // without gradients. chunk > 0 feeds the sequence `chunk` tokens at a time through the model's
  // state (recurrent families: memory flat in T; attention: its key-value cache), 0 = one forward.
  // A length that does not fit in memory is an Error naming it.
  virtual torch::Tensor next_token_logprobs(const torch::Tensor& input_ids, int64_t chunk) = 0;
  // lm-eval loglikelihood on token ids, one (ll, is_greedy) per (context, continuation) pair: ll = Σ log p of the
  // continuation tokens given everything before them; is_greedy = each is the argmax. Contexts are non-empty;
  // a pair longer than max_length + 1 keeps its last max_length + 1 tokens (left truncation). Batched with right
  // padding only (never left padding into recurrent states), longest first; the results are in input order.
  virtual std::vector<std::pair<double, bool>> loglikelihood_tokens(
      const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& requests, int64_t batch_size,
      int64_t max_length) = 0;
  // Greedy continuation of a non-empty prompt from the model's initial state; the new tokens
  // without the stop id.
  virtual std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt_ids,
                                               const GenerationRequest& request) = 0;
};

}  // namespace mnemo
