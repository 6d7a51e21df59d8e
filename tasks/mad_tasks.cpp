// MAD tasks in the task registry (docs/tasks.md#mad). Defaults = mad-lab's baseline of each task;
// the dataset sizes are the run's n_train / n_test (mad-lab: 12,800 / 1,280; memorization 256).
#include "tasks/mad_tasks.h"

#include <set>

#include "tasks/token_batch.h"
#include "synthetic/mqar.h"  // example_seed: train/test disjoint per-example seeds

namespace mnemo {
namespace {

class MadTokenTask : public TokenTask {
 public:
  MadTokenTask(MadTask t, const json& params) : task_(t), p_(mad_params_from_json(t, params)) {
    params_ = mad_params_to_json(t, p_);
    if (t == MadTask::compression) params_["backbone"] = "autoencoder";
  }
  std::string name() const override { return "mad_" + mad_task_name(task_); }
  json params() const override { return params_; }
  int64_t vocab_size() const override { return p_.vocab_size; }
  int64_t seq_len() const override { return mad_input_length(task_, p_); }
  std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const override {
    std::vector<TokenExample> out;
    out.reserve(n);
    for (int64_t i = 0; i < n; ++i) out.push_back(mad_example(task_, p_, split, example_seed(split, seed, i)));
    return out;
  }
  // mad-lab's reported accuracy: macro average over classes per batch of 128, averaged over batches.
  json test_metrics_of(const std::vector<TokenExample>& test,
                       const std::vector<std::vector<int64_t>>& predictions) const override {
    std::vector<std::vector<int64_t>> labels;
    labels.reserve(test.size());
    for (const auto& ex : test) labels.push_back(ex.labels);
    return {{"accuracy_macro", mad_accuracy(predictions, labels, p_.vocab_size).macro_batched}};
  }
  std::vector<std::string> test_metric_names() const override { return {"accuracy_macro"}; }

 private:
  MadTask task_;
  MadParams p_;
  json params_;
};

std::string description(MadTask t) {
  switch (t) {
    case MadTask::in_context_recall:
      return "MAD in-context recall (docs/tasks.md#mad): recall the value of a key seen earlier; multi-query";
    case MadTask::noisy_in_context_recall:
      return "MAD noisy in-context recall (docs/tasks.md#mad): in-context recall with noise-token pairs (frac_noise)";
    case MadTask::fuzzy_in_context_recall:
      return "MAD fuzzy in-context recall (docs/tasks.md#mad): keys and values are motifs of 1..k / 1..v tokens";
    case MadTask::selective_copying:
      return "MAD selective copying (docs/tasks.md#mad): copy the non-blank tokens, in order, after the copy token";
    case MadTask::compression:
      return "MAD compression (docs/tasks.md#mad): reconstruct the sequence from the last token's encoding (autoencoder)";
    case MadTask::memorization:
      return "MAD memorization (docs/tasks.md#mad): a fixed key->value map learnt in the weights (nothing in context)";
  }
  return "";
}

const json& param_help() {
  static const json h = {
      {"vocab_size", "V: vocabulary incl. special tokens (keys/values, noise and copy/pad/insert tokens)"},
      {"seq_len", "L: sequence length (recall tasks: L tokens shifted to L-1 inputs)"},
      {"multi_query", "score every repeated key's value, not only the final probe (mad-lab default)"},
      {"frac_noise", "probability that a slot holds noise tokens instead of a key-value pair"},
      {"noise_vocab_size", "noise tokens: the top of the non-special vocabulary"},
      {"k_motif_size", "maximum tokens per key (fuzzy recall; test prompts use this size)"},
      {"v_motif_size", "maximum tokens per value (fuzzy recall)"},
      {"num_tokens_to_copy", "tokens to copy (selective copying)"},
      {"kv_map_seed", "seed of the fixed global key->value map (memorization; mad-lab 12345)"}};
  return h;
}

}  // namespace

void register_mad_tasks(TaskRegistry& r) {
  for (MadTask t : mad_tasks()) {
    TaskFamily f;
    f.name = "mad_" + mad_task_name(t);
    f.description = description(t);
    f.defaults = mad_params_to_json(t, mad_baseline(t));
    f.help = json::object();
    for (const auto& k : mad_param_keys(t)) f.help[k] = param_help().at(k);
    f.trainable = true;
    f.evaluation = "token_predictions";
    f.make = [t](const json& p) { return std::make_shared<MadTokenTask>(t, p); };
    r.add(std::move(f));
  }
}

std::string resolve_task_alias(const std::string& name, const json& params) {
  if (name != "mad") return name;
  std::string known;
  for (MadTask t : mad_tasks()) known += (known.empty() ? "" : ", ") + mad_task_name(t);
  if (!params.is_object() || !params.contains("task") || !params["task"].is_string())
    throw Error("`mad` needs --task with one of: " + known);
  return "mad_" + mad_task_name(mad_task_from_name(params["task"].get<std::string>()));
}

std::string task_backbone(const Task& task) {
  const json p = task.params();
  return p.is_object() && p.contains("backbone") ? p["backbone"].get<std::string>() : "language_model";
}

double fraction_of_test_in_train(const std::vector<TokenExample>& train, const std::vector<TokenExample>& test) {
  if (test.empty()) return 0.0;
  std::set<std::vector<int64_t>> seen;
  for (const auto& e : train) seen.insert(e.input_ids);
  std::set<std::vector<int64_t>> distinct_test;
  for (const auto& e : test) distinct_test.insert(e.input_ids);
  int64_t in_train = 0;
  for (const auto& ids : distinct_test) in_train += seen.count(ids);
  // mad-lab: 1 - |test_set - train_set| / |test_set| over distinct inputs.
  return static_cast<double>(in_train) / static_cast<double>(distinct_test.size());
}

MadAccuracy evaluate_mad_accuracy(const std::function<torch::Tensor(const torch::Tensor&)>& logits_fn,
                                  const std::vector<TokenExample>& examples, int64_t vocab_size,
                                  const torch::Device& device, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> preds, labels;
  for (size_t s = 0; s < examples.size(); s += batch_size) {
    std::vector<const TokenExample*> chunk;
    for (size_t i = s; i < std::min(examples.size(), s + batch_size); ++i) chunk.push_back(&examples[i]);
    auto batch = collate(chunk, device);
    auto argmax = logits_fn(batch.input_ids).argmax(-1).to(torch::kCPU).contiguous();
    auto a = argmax.accessor<int64_t, 2>();
    for (size_t b = 0; b < chunk.size(); ++b) {
      const auto& ex = *chunk[b];
      std::vector<int64_t> row(ex.labels.size());
      for (size_t t = 0; t < row.size(); ++t) row[t] = a[b][t];
      preds.push_back(std::move(row));
      labels.push_back(ex.labels);
    }
  }
  return mad_accuracy(preds, labels, vocab_size, batch_size);
}

}  // namespace mnemo
