// A runtime LanguageModel behind the evaluator's interface (tasks/model_api.h).
#pragma once
#include "runtime/generation.h"
#include "runtime/model.h"
#include "tasks/model_api.h"

namespace mnemo {

// EvalModel::next_token_logprobs for a runtime LanguageModel (engine/lm_scoring.cpp).
torch::Tensor language_model_logprobs(LanguageModelImpl& model, const torch::Tensor& ids, int64_t chunk);

class LanguageModelAdapter : public EvalModel {
 public:
  LanguageModelAdapter(LanguageModelImpl& model, torch::Device device) : model_(model), device_(device) {}
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  torch::Device device() const override { return device_; }
  torch::Tensor logits(const torch::Tensor& input_ids) override {
    torch::NoGradGuard no_grad;
    const bool was_training = model_.is_training();
    model_.eval();
    auto out = model_.forward(input_ids.to(device_));
    if (was_training) model_.train();
    return out;
  }
  torch::Tensor next_token_logprobs(const torch::Tensor& input_ids, int64_t chunk) override {
    return language_model_logprobs(model_, input_ids.to(device_), chunk);
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt_ids,
                                       const GenerationRequest& request) override {
    GenerationOptions o;
    o.max_new_tokens = request.max_new_tokens;
    o.stop_ids = request.stop_ids;
    o.should_stop = request.should_stop;
    return greedy_generate(model_, prompt_ids, o, device_);
  }

 private:
  LanguageModelImpl& model_;
  torch::Device device_;
};

}  // namespace mnemo
