// A runtime LanguageModel behind the evaluator's interface (tasks/model_api.h).
#pragma once
#include <optional>
#include <utility>
#include <vector>

#include "core/common.h"
#include "runtime/backbone.h"
#include "runtime/generation.h"
#include "runtime/model.h"
#include "tasks/model_api.h"

namespace mnemo {

// EvalModel::next_token_logprobs for a runtime LanguageModel (engine/evaluation/lm_scoring.cpp).
torch::Tensor language_model_logprobs(LanguageModelImpl& model, const torch::Tensor& ids, int64_t chunk);

using TokenPair = std::pair<std::vector<int64_t>, std::vector<int64_t>>;  // (context ids, continuation ids)

// lm-eval's request order for _loglikelihood_tokens (lm_eval/models/huggingface.py `_collate`, Collator):
// descending len(context + continuation), ties by the joint token sequence ascending, stable.
std::vector<size_t> loglikelihood_order(const std::vector<TokenPair>& requests);

// EvalModel::loglikelihood_tokens for a runtime LanguageModel (engine/evaluation/loglikelihood.cpp): lm-eval HFLM
// `_loglikelihood_tokens` semantics, batches of `batch_size` in loglikelihood_order, right padding.
std::vector<std::pair<double, bool>> language_model_loglikelihood(LanguageModelImpl& model, const torch::Device& device,
                                                                  const std::vector<TokenPair>& requests,
                                                                  int64_t batch_size, int64_t max_length);

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
  std::vector<std::pair<double, bool>> loglikelihood_tokens(const std::vector<TokenPair>& requests,
                                                            int64_t batch_size, int64_t max_length) override {
    return language_model_loglikelihood(model_, device_, requests, batch_size, max_length);
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt_ids,
                                       const GenerationRequest& request) override {
    GenerationOptions o;
    o.max_new_tokens = request.max_new_tokens;
    o.stop_ids = request.stop_ids;
    o.should_stop = request.should_stop;
    o.prefill_chunk = request.prefill_chunk;
    return greedy_generate(model_, prompt_ids, o, device_);
  }

 private:
  LanguageModelImpl& model_;
  torch::Device device_;
};

// A task's backbone (runtime/backbone.h) behind the evaluator's interface: a language model answers every request
// (LanguageModelAdapter); another backbone (MAD compression's autoencoder) gives logits only, for token tasks, and
// any text request is an Error naming its kind.
class BackboneAdapter : public EvalModel {
 public:
  BackboneAdapter(Backbone& backbone, torch::Device device) : backbone_(backbone), device_(device) {
    if (backbone_.language_model) lm_.emplace(*backbone_.language_model, device);
  }
  int64_t vocab_size() const override { return backbone_.config().vocab_size; }
  torch::Device device() const override { return device_; }
  torch::Tensor logits(const torch::Tensor& input_ids) override {
    torch::NoGradGuard no_grad;
    const bool was_training = backbone_.module->is_training();
    backbone_.module->eval();
    auto out = backbone_.forward(input_ids.to(device_));
    if (was_training) backbone_.module->train();
    return out;
  }
  torch::Tensor next_token_logprobs(const torch::Tensor& input_ids, int64_t chunk) override {
    return language_model().next_token_logprobs(input_ids, chunk);
  }
  std::vector<std::pair<double, bool>> loglikelihood_tokens(const std::vector<TokenPair>& requests,
                                                            int64_t batch_size, int64_t max_length) override {
    return language_model().loglikelihood_tokens(requests, batch_size, max_length);
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt_ids,
                                       const GenerationRequest& request) override {
    return language_model().generate_greedy(prompt_ids, request);
  }

 private:
  LanguageModelAdapter& language_model() {
    if (!lm_) throw Error("the checkpoint holds a " + backbone_.kind + ", not a language model: it scores token tasks only");
    return *lm_;
  }
  Backbone& backbone_;
  torch::Device device_;
  std::optional<LanguageModelAdapter> lm_;
};

}  // namespace mnemo
