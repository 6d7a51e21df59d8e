#include "engine/training/objective.h"

#include <cmath>

#include "engine/evaluation/model_adapter.h"
#include "engine/evaluation/token_eval.h"
#include "tasks/lm_metrics.h"

namespace mnemo {

bool higher_is_better(const std::string& metric) { return metric.rfind("accuracy", 0) == 0; }

namespace {

class TokenObjective : public Objective {
 public:
  TokenObjective(const TokenTask& task, int64_t n_test, uint64_t seed, int64_t batch, torch::Device device)
      : task_(task), batch_(batch), device_(device) {
    if (n_test > 0) test_ = task.examples(Split::test, n_test, seed);
  }
  std::string eval_split() const override { return "test"; }
  bool has_eval() const override { return !test_.empty(); }
  std::string default_primary() const override { return "accuracy"; }
  Metrics evaluate(Backbone& model) override {
    auto ev = evaluate_tokens(model, test_, batch_, device_);
    Metrics m = {{"loss", ev.loss}, {"accuracy", ev.accuracy}};
    const json extra = task_.test_metrics_of(test_, ev.predictions);  // MQAR: per N_KV slice; MAD: accuracy_macro
    for (auto it = extra.begin(); it != extra.end(); ++it) m.push_back({it.key(), it.value().get<double>()});
    return m;
  }
  Metrics train_metrics(double) const override { return {}; }

 private:
  const TokenTask& task_;
  int64_t batch_;
  torch::Device device_;
  std::vector<TokenExample> test_;
};

class LmObjective : public Objective {
 public:
  LmObjective(const LmData& data, int64_t seq_len, int64_t val_tokens, int64_t batch, torch::Device device)
      : data_(data), T_(seq_len), val_tokens_(val_tokens), batch_(batch), device_(device) {}
  std::string eval_split() const override { return "val"; }
  bool has_eval() const override { return true; }
  std::string default_primary() const override { return "ppl"; }
  Metrics evaluate(Backbone& model) override {
    if (!model.language_model) throw Error("language modelling needs a language-model backbone");
    const TokenShard& val = *data_.validation;
    // Windows per forward: eval_batch_size, capped so that the logits stay under ~256 MB.
    const int64_t V = model.config().vocab_size;
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(batch_, (int64_t(64) << 20) / std::max<int64_t>(1, T_ * V)));
    WindowScoring opt;
    opt.length = T_;
    opt.max_tokens = val_tokens_;
    opt.batch_size = rows;
    auto read = [&](int64_t s, int64_t n, int64_t* out) { val.read(s, n, out); };
    auto logprobs = [&](const torch::Tensor& ids) {
      return language_model_logprobs(*model.language_model, ids.to(device_), 0);
    };
    const WindowScore s = score_windows(val.size(), read, logprobs, data_.byte_lengths, opt);
    model.module->train();
    return {{"loss", s.total.loss()}, {"ppl", s.total.ppl()}, {"bpb", s.total.bpb()}};
  }
  Metrics train_metrics(double loss) const override { return {{"ppl", std::exp(loss)}}; }

 private:
  const LmData& data_;
  int64_t T_, val_tokens_, batch_;
  torch::Device device_;
};

}  // namespace

std::unique_ptr<Objective> make_token_objective(const TokenTask& task, int64_t n_test, uint64_t seed,
                                                int64_t eval_batch_size, const torch::Device& device) {
  return std::make_unique<TokenObjective>(task, n_test, seed, eval_batch_size, device);
}

std::unique_ptr<Objective> make_lm_objective(const LmData& data, int64_t seq_len, int64_t val_tokens,
                                             int64_t eval_batch_size, const torch::Device& device) {
  return std::make_unique<LmObjective>(data, seq_len, val_tokens, eval_batch_size, device);
}

}  // namespace mnemo
