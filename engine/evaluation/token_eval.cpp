#include "engine/evaluation/token_eval.h"

#include "tasks/scoring.h"

#include <cmath>

namespace mnemo {

namespace {
// fp32 at least (bf16/fp16 logits are upcast; fp64 stays fp64 for the equivalence tests).
torch::Tensor loss_logits(const torch::Tensor& logits) {
  auto flat = logits.reshape({-1, logits.size(-1)});
  return flat.scalar_type() == torch::kDouble ? flat : flat.to(torch::kFloat32);
}
}  // namespace

torch::Tensor token_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(loss_logits(logits), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kIgnoreLabel));
}

torch::Tensor token_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(loss_logits(logits), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kIgnoreLabel).reduction(torch::kSum));
}

TokenEvalResult evaluate_tokens(Backbone& model, const std::vector<TokenExample>& examples, int64_t batch_size,
                                const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.module->is_training();
  model.module->eval();
  TokenEvalResult r;
  double loss_sum = 0;
  for (size_t s = 0; s < examples.size(); s += batch_size) {
    std::vector<const TokenExample*> chunk;
    for (size_t i = s; i < std::min(examples.size(), s + batch_size); ++i) chunk.push_back(&examples[i]);
    auto batch = collate(chunk, device);
    auto logits = model.forward(batch.input_ids);
    // A NaN logit still gives an argmax and so an "accuracy": never scored.
    const auto finite = torch::isfinite(logits).reshape({logits.size(0), -1}).all(1).cpu();
    for (int64_t i = 0; !finite.all().item<bool>() && i < finite.size(0); ++i)
      if (!finite[i].item<bool>())
        throw Error("test example " + std::to_string(s + static_cast<size_t>(i)) +
                    ": the model's logits are not finite (nan or inf): non-finite weights or activations");
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
  if (was_training) model.module->train();
  return r;
}

}  // namespace mnemo
