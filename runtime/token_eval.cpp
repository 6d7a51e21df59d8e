#include "runtime/token_eval.h"

#include <cmath>

namespace mnemo {

TokenBatch collate(const std::vector<const TokenExample*>& examples, const torch::Device& device) {
  int64_t T = 0;
  for (const auto* e : examples) {
    if (e->input_ids.size() != e->labels.size())
      throw Error("example has " + std::to_string(e->input_ids.size()) + " input ids but " +
                  std::to_string(e->labels.size()) + " labels");
    T = std::max<int64_t>(T, e->input_ids.size());
  }
  const int64_t B = examples.size();
  auto ids = torch::zeros({B, T}, torch::kInt64);
  auto labels = torch::full({B, T}, kIgnoreLabel, torch::kInt64);
  auto ia = ids.accessor<int64_t, 2>();
  auto la = labels.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (size_t t = 0; t < examples[b]->input_ids.size(); ++t) {
      ia[b][t] = examples[b]->input_ids[t];
      la[b][t] = examples[b]->labels[t];
    }
  return {ids.to(device), labels.to(device)};
}

torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32),
                          labels.reshape({-1}), F::CrossEntropyFuncOptions().ignore_index(kIgnoreLabel));
}

torch::Tensor per_example_accuracy(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto mask = labels != kIgnoreLabel;
  auto correct = (logits.argmax(-1) == labels) & mask;
  auto n = mask.sum(1).to(torch::kFloat64);
  return correct.sum(1).to(torch::kFloat64) / n;  // NaN where n == 0
}

TokenEvalResult evaluate_tokens(LanguageModelImpl& model, const std::vector<TokenExample>& examples,
                                int64_t batch_size, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  TokenEvalResult r;
  double loss_sum = 0;
  for (size_t s = 0; s < examples.size(); s += batch_size) {
    std::vector<const TokenExample*> chunk;
    for (size_t i = s; i < std::min(examples.size(), s + batch_size); ++i) chunk.push_back(&examples[i]);
    auto batch = collate(chunk, device);
    auto logits = model.forward(batch.input_ids);
    const int64_t n_labels = (batch.labels != kIgnoreLabel).sum().item<int64_t>();
    if (n_labels > 0) loss_sum += token_loss(logits, batch.labels).item<double>() * n_labels;
    r.n_labels += n_labels;
    auto acc = per_example_accuracy(logits, batch.labels).cpu();
    for (int64_t i = 0; i < acc.size(0); ++i) {
      double a = acc[i].item<double>();
      if (!std::isnan(a)) r.per_example.push_back(a);
    }
  }
  r.n_examples = r.per_example.size();
  r.loss = r.n_labels ? loss_sum / r.n_labels : 0.0;
  double sum = 0;
  for (double a : r.per_example) sum += a;
  r.accuracy = r.n_examples ? sum / r.n_examples : 0.0;
  if (was_training) model.train();
  return r;
}

}  // namespace mnemo
