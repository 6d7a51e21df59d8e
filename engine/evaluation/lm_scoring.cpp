// Next-token log-probabilities of a language model, whole or chunk by chunk through its state
// (length extrapolation, docs/tasks.md#language-modelling: recurrent families keep memory flat in the length).
#include <torch/torch.h>

#include "engine/evaluation/model_adapter.h"

namespace mnemo {

namespace {
// log p(ids[:, t+1] | ...) from logits [B, c, V] of positions whose next tokens are `next` [B, c].
torch::Tensor gather_logprobs(const torch::Tensor& logits, const torch::Tensor& next) {
  auto lp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  return lp.gather(-1, next.unsqueeze(-1)).squeeze(-1);
}
}  // namespace

torch::Tensor language_model_logprobs(LanguageModelImpl& model, const torch::Tensor& ids, int64_t chunk) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t T = ids.size(1);
  torch::Tensor out;
  try {
    if (chunk <= 0 || chunk >= T) {
      out = gather_logprobs(model.forward(ids.narrow(1, 0, T - 1)), ids.narrow(1, 1, T - 1));
    } else {
      ModelState state = model.initial_state();
      std::vector<torch::Tensor> parts;
      for (int64_t s = 0; s < T - 1; s += chunk) {
        const int64_t c = std::min(chunk, T - 1 - s);
        parts.push_back(gather_logprobs(model.forward(ids.narrow(1, s, c), &state), ids.narrow(1, s + 1, c)));
      }
      out = torch::cat(parts, 1);
    }
  } catch (const c10::Error& e) {
    if (was_training) model.train();
    const std::string what = e.what_without_backtrace();
    if (what.find("alloc") != std::string::npos || what.find("out of memory") != std::string::npos)
      throw Error("a sequence of " + std::to_string(T) + " tokens (batch " + std::to_string(ids.size(0)) +
                  ") does not fit in memory for model '" + model.config().model +
                  "' (attention keeps every key and value); evaluate shorter lengths or a smaller batch");
    throw;
  }
  if (was_training) model.train();
  return out;
}

}  // namespace mnemo
