// The token-level objective (cross-entropy over labelled positions) and evaluation (loss +
// per-example accuracy, tasks/scoring.h; docs/tasks.md#mqar).
#pragma once
#include <torch/torch.h>

#include <vector>

#include <functional>

#include "runtime/backbone.h"
#include "tasks/harness/request.h"
#include "tasks/model_api.h"
#include "tasks/task.h"
#include "tasks/token_batch.h"

namespace mnemo {

// Cross-entropy over labelled positions (ignore_index -100), mean over those positions.
torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// The same summed over labelled positions (gradient accumulation divides by the step's label count).
torch::Tensor token_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels);

struct TokenEvalResult {
  double loss = 0;      // mean over all labelled positions
  double accuracy = 0;  // mean over examples of per-example accuracy
  int64_t n_examples = 0, n_labels = 0;
  std::vector<double> per_example;                // examples without a labelled position left out
  std::vector<std::vector<int64_t>> predictions;  // per example (all of them): argmax at every position
};

// In eval mode without gradients (the training flag is restored).
TokenEvalResult evaluate_tokens(Backbone& model, const std::vector<TokenExample>& examples, int64_t batch_size,
                                const torch::Device& device);

// The evaluation driver's token_predictions requests (tasks/harness/request.h): their input ids through
// model.logits in batches of `batch_size`, in the order given (right-padded to the batch's longest); per request the
// argmax at every position and the cross-entropy (fp32 at least) summed over its labelled positions. A row whose
// logits are not finite is an Error naming the request's document ("test example N"). `progress(done)` after each batch (may be empty).
std::vector<harness::Response> answer_token_requests(EvalModel& model, const std::vector<const harness::Request*>& requests,
                                                     int64_t batch_size, const std::function<void(int64_t)>& progress);

// The evaluation driver's token_logprobs requests: consecutive requests of one length and one prefill_chunk, up to
// `batch_size` of them, as one [B, n] batch through model.next_token_logprobs (no padding: a batch never mixes
// lengths); per request log p(ids[t] | ids[:t]) for t = 1 .. n - 1 in fp64. A non-finite value is an Error naming the
// request's document and the position. `progress(done)` after each batch (may be empty).
std::vector<harness::Response> answer_logprob_requests(EvalModel& model, const std::vector<const harness::Request*>& requests,
                                                       int64_t batch_size, const std::function<void(int64_t)>& progress);

}  // namespace mnemo
