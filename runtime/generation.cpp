#include "runtime/generation.h"

#include <algorithm>

namespace mnemo {

namespace {
// Restores the module's training flag on scope exit.
struct EvalModeGuard {
  explicit EvalModeGuard(torch::nn::Module& m) : module(m), was_training(m.is_training()) { module.eval(); }
  ~EvalModeGuard() { module.train(was_training); }
  torch::nn::Module& module;
  bool was_training;
};
}  // namespace

std::vector<int64_t> greedy_generate(LanguageModelImpl& model, const std::vector<int64_t>& prompt_ids,
                                     const GenerationOptions& options, const torch::Device& device) {
  if (prompt_ids.empty()) throw Error("greedy_generate: empty prompt (prepend BOS or a context token)");
  if (options.max_new_tokens < 0)
    throw Error("greedy_generate: max_new_tokens must be >= 0, got " + std::to_string(options.max_new_tokens));
  const int64_t vocab = model.config().vocab_size;
  for (int64_t id : prompt_ids)
    if (id < 0 || id >= vocab)
      throw Error("greedy_generate: prompt token " + std::to_string(id) + " is outside the model vocabulary [0, " +
                  std::to_string(vocab) + ")");
  std::vector<int64_t> out;
  if (options.max_new_tokens == 0) return out;

  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model);
  ModelState state = model.initial_state();
  const auto opts = torch::TensorOptions().dtype(torch::kLong);
  const int64_t T = static_cast<int64_t>(prompt_ids.size());
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : T;

  torch::Tensor last_logits;
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t e = std::min(T, s + chunk);
    std::vector<int64_t> piece(prompt_ids.begin() + s, prompt_ids.begin() + e);
    auto ids = torch::tensor(piece, opts).view({1, e - s}).to(device);
    last_logits = model.forward(ids, &state).select(1, e - s - 1);  // [1, V]
  }
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    // argmax over NaN logits still names a token: a model with non-finite weights would "generate" text.
    if (!torch::isfinite(last_logits).all().item<bool>())
      throw Error("the model's logits for generated token " + std::to_string(step + 1) +
                  " are not finite (nan or inf): non-finite weights or activations");
    const int64_t next = last_logits.argmax(-1).item<int64_t>();
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
    out.push_back(next);
    if (options.should_stop && options.should_stop(out)) break;
    if (step + 1 == options.max_new_tokens) break;
    auto ids = torch::tensor(std::vector<int64_t>{next}, opts).view({1, 1}).to(device);
    last_logits = model.forward(ids, &state).select(1, 0);
  }
  return out;
}

std::vector<int64_t> greedy_generate(LanguageModelImpl& model, const std::vector<int64_t>& prompt_ids,
                                     int64_t max_new_tokens, const std::vector<int64_t>& stop_ids,
                                     const torch::Device& device) {
  GenerationOptions o;
  o.max_new_tokens = max_new_tokens;
  o.stop_ids = stop_ids;
  return greedy_generate(model, prompt_ids, o, device);
}

}  // namespace mnemo
