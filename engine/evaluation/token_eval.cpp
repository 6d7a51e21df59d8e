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
    const torch::Tensor argmax = logits.argmax(-1).to(torch::kCPU).contiguous();
    const auto am = argmax.accessor<int64_t, 2>();
    for (size_t e = 0; e < chunk.size(); ++e) {
      std::vector<int64_t> row(chunk[e]->labels.size());
      for (size_t t = 0; t < row.size(); ++t) row[t] = am[static_cast<int64_t>(e)][static_cast<int64_t>(t)];
      r.predictions.push_back(std::move(row));
    }
    auto acc = per_example_accuracy(argmax, batch.labels.cpu());
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

std::vector<harness::Response> answer_token_requests(EvalModel& model, const std::vector<const harness::Request*>& requests,
                                                     int64_t batch_size, const std::function<void(int64_t)>& progress) {
  namespace F = torch::nn::functional;
  torch::NoGradGuard no_grad;
  std::vector<harness::Response> out(requests.size());
  for (size_t s = 0; s < requests.size(); s += static_cast<size_t>(batch_size)) {
    const size_t e = std::min(requests.size(), s + static_cast<size_t>(batch_size));
    int64_t T = 0;
    for (size_t k = s; k < e; ++k) T = std::max<int64_t>(T, static_cast<int64_t>(requests[k]->input_ids.size()));
    const int64_t B = static_cast<int64_t>(e - s);
    torch::Tensor ids = torch::zeros({B, T}, torch::kInt64), labels = torch::full({B, T}, kIgnoreLabel, torch::kInt64);
    for (size_t k = s; k < e; ++k) {
      const auto n = static_cast<int64_t>(requests[k]->input_ids.size());
      ids[static_cast<int64_t>(k - s)].narrow(0, 0, n).copy_(torch::tensor(requests[k]->input_ids, torch::kInt64));
      labels[static_cast<int64_t>(k - s)].narrow(0, 0, n).copy_(torch::tensor(requests[k]->labels, torch::kInt64));
    }
    const torch::Tensor logits = model.logits(ids);
    const torch::Tensor finite = torch::isfinite(logits).reshape({B, -1}).all(1).cpu();
    for (int64_t i = 0; i < B; ++i)
      if (!finite[i].item<bool>())
        throw Error("test example " + std::to_string(requests[s + static_cast<size_t>(i)]->doc_id) +
                    ": the model's logits are not finite (nan or inf): non-finite weights or activations");
    const torch::Tensor on_device = labels.to(logits.device());
    const torch::Tensor nll = F::cross_entropy(loss_logits(logits), on_device.reshape({-1}),
                                               F::CrossEntropyFuncOptions().ignore_index(kIgnoreLabel).reduction(torch::kNone))
                                  .reshape({B, T})
                                  .sum(1)
                                  .to(torch::kCPU, torch::kFloat64);
    const torch::Tensor argmax = logits.argmax(-1).to(torch::kCPU).contiguous();
    const auto am = argmax.accessor<int64_t, 2>();
    for (size_t k = s; k < e; ++k) {
      harness::Response& r = out[k];
      const auto i = static_cast<int64_t>(k - s);
      r.predictions.resize(requests[k]->input_ids.size());
      for (size_t t = 0; t < r.predictions.size(); ++t) r.predictions[t] = am[i][static_cast<int64_t>(t)];
      r.loss_sum = nll[i].item<double>();
      for (int64_t l : requests[k]->labels) r.n_labels += l != kIgnoreLabel;
    }
    if (progress) progress(static_cast<int64_t>(e));
  }
  return out;
}

std::vector<harness::Response> answer_logprob_requests(EvalModel& model, const std::vector<const harness::Request*>& requests,
                                                       int64_t batch_size, const std::function<void(int64_t)>& progress) {
  torch::NoGradGuard no_grad;
  std::vector<harness::Response> out(requests.size());
  size_t s = 0;
  while (s < requests.size()) {
    const size_t n = requests[s]->input_ids.size();
    const int64_t chunk = requests[s]->prefill_chunk;
    size_t e = s + 1;
    while (e < requests.size() && e - s < static_cast<size_t>(batch_size) && requests[e]->input_ids.size() == n &&
           requests[e]->prefill_chunk == chunk)
      ++e;
    const auto B = static_cast<int64_t>(e - s), L = static_cast<int64_t>(n);
    std::vector<int64_t> flat;
    flat.reserve(static_cast<size_t>(B * L));
    for (size_t k = s; k < e; ++k) flat.insert(flat.end(), requests[k]->input_ids.begin(), requests[k]->input_ids.end());
    const torch::Tensor ids = torch::from_blob(flat.data(), {B, L}, torch::kInt64).to(model.device());
    const torch::Tensor lp = model.next_token_logprobs(ids, chunk).to(torch::kCPU, torch::kFloat64).contiguous();
    if (lp.dim() != 2 || lp.size(0) != B || lp.size(1) != L - 1)
      throw Error("the model returned log-probabilities of shape " + std::to_string(lp.size(0)) + "x" +
                  std::to_string(lp.dim() > 1 ? lp.size(1) : 0) + ", expected " + std::to_string(B) + "x" +
                  std::to_string(L - 1));
    const double* v = lp.data_ptr<double>();
    for (size_t k = s; k < e; ++k) {
      const double* row = v + static_cast<int64_t>(k - s) * (L - 1);
      for (int64_t p = 0; p < L - 1; ++p)
        if (!std::isfinite(row[p]))
          throw Error("document " + std::to_string(requests[k]->doc_id) +
                      ": non-finite log-probability at window position " + std::to_string(p + 1) +
                      " (non-finite weights or activations)");
      out[k].logprobs.assign(row, row + (L - 1));
    }
    s = e;
    if (progress) progress(static_cast<int64_t>(e));
  }
  return out;
}

}  // namespace mnemo
