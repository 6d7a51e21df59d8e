#include "synthetic/learnability.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

namespace mnemo {

void validate(const LearnabilityTargetParams& p) {
  auto fail = [](const std::string& m) { throw Error("learnability: " + m); };
  if (p.setting < 1 || p.setting > 5) fail("setting must be 1..5, got " + std::to_string(p.setting));
  if (p.d < 1) fail("d must be >= 1, got " + std::to_string(p.d));
  if (p.seq_len < 1) fail("seq_len must be >= 1, got " + std::to_string(p.seq_len));
  if (p.rank < 1 || (p.setting == 1 && p.rank > p.d))
    fail("rank must be in [1, d = " + std::to_string(p.d) + "], got " + std::to_string(p.rank));
  if (p.setting == 5 && p.window < 1) fail("window must be >= 1, got " + std::to_string(p.window));
}

std::string learnability_setting_name(int setting) {
  switch (setting) {
    case 1: return "low-rank mapping";
    case 2: return "MLP mapping";
    case 3: return "attention + MLP";
    case 4: return "attention outputs as inputs";
    case 5: return "sliding-window attention + MLP";
  }
  throw Error("learnability: setting must be 1..5, got " + std::to_string(setting));
}

torch::Tensor causal_softmax_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t window) {
  const int64_t T = q.size(0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(1)));
  const int64_t block = 512;
  auto keys_pos = torch::arange(T, torch::kInt64).unsqueeze(0);  // [1, T]
  std::vector<torch::Tensor> out;
  for (int64_t s = 0; s < T; s += block) {
    const int64_t e = std::min(T, s + block);
    auto rows = torch::arange(s, e, torch::kInt64).unsqueeze(1);  // [b, 1]
    auto allowed = keys_pos <= rows;
    if (window > 0) allowed = allowed & (keys_pos > rows - window);
    auto scores = torch::matmul(q.slice(0, s, e), k.t()) * scale;
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
    out.push_back(torch::matmul(torch::softmax(scores, 1), v));
  }
  return torch::cat(out, 0);
}

LearnabilitySequence learnability_sequence(const LearnabilityTargetParams& p, uint64_t seed, torch::Dtype dtype) {
  validate(p);
  auto gen = at::detail::createCPUGenerator(seed);
  const auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  auto normal = [&](int64_t rows, int64_t cols, double var) {
    return torch::randn({rows, cols}, gen, opt) * std::sqrt(var);
  };
  const int64_t d = p.d, T = p.seq_len;
  // Draw every random object in a fixed order, so the inputs i_j of a seed are the same in
  // every setting (and M* the same in settings 2-5).
  auto inputs = normal(T, d, 1.0);
  auto W1 = normal(d, d, 1.0 / d), W2 = normal(d, d, 1.0 / d);  // M*: [out, in], fan_in = d
  auto WQ = normal(d, d, 1.0 / d), WK = normal(d, d, 1.0 / d), WV = normal(d, d, 1.0 / d);
  auto X = normal(d, p.rank, 1.0 / d), Y = normal(p.rank, d, 1.0 / p.rank);
  auto mlp = [&](const torch::Tensor& x) { return torch::matmul(torch::gelu(torch::matmul(x, W1.t())), W2.t()); };

  LearnabilitySequence s;
  switch (p.setting) {
    case 1: {
      auto W = torch::matmul(X, Y);  // o_j = W^T i_j  <=>  O = I W (rows)
      s.inputs = inputs;
      s.targets = torch::matmul(inputs, W);
      break;
    }
    case 2:
      s.inputs = inputs;
      s.targets = mlp(inputs);
      break;
    default: {
      // q_j = W_Q^T i_j  <=>  Q = I W_Q (rows)
      auto q = torch::matmul(inputs, WQ), k = torch::matmul(inputs, WK), v = torch::matmul(inputs, WV);
      auto att = causal_softmax_attention(q, k, v, p.setting == 5 ? p.window : 0);
      s.inputs = p.setting == 4 ? att : inputs;
      s.targets = mlp(att);
      break;
    }
  }
  s.inputs = s.inputs.to(dtype).contiguous();
  s.targets = s.targets.to(dtype).contiguous();
  return s;
}

}  // namespace mnemo
