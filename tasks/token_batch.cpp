#include "tasks/token_batch.h"

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

}  // namespace mnemo
