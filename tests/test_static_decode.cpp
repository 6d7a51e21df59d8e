// Greedy decoding on static tensors (engine/training/static_decode.h), the step `bench --mode decode --cuda-graph`
// captures: run eagerly on the CPU it must give the tokens and the state of the model's own decode, token by token;
// a model whose decode step is not static is refused. The captured form runs on a GPU ([.cuda-decode_graph]).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/training/static_decode.h"
#include "runtime/model.h"
#include "tests/model_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;

namespace static_decode_test {

struct Decoded {
  std::vector<int64_t> tokens;
  ModelState state;
};

// `n` greedy tokens after `prompt`, by the model's own decode (capture false: eager) or by StaticDecodeStep.
Decoded decode(LanguageModelImpl& model, const torch::Tensor& prompt, int64_t n, bool static_step, bool capture,
               const torch::Device& device) {
  torch::NoGradGuard no_grad;
  ModelState state = model.initial_state();
  auto logits = model.forward(prompt.to(device), &state);
  auto next = logits.select(1, logits.size(1) - 1).argmax(-1, true);
  Decoded out;
  if (static_step) {
    StaticDecodeStep step(model, state, next, device, Precision::fp32, capture);
    for (int64_t k = 0; k < n; ++k) out.tokens.push_back(step.step()[0][0].item<int64_t>());
    out.state = step.state();
    return out;
  }
  for (int64_t k = 0; k < n; ++k) {
    logits = model.forward(next, &state);
    next = logits.select(1, 0).argmax(-1, true);
    out.tokens.push_back(next[0][0].item<int64_t>());
  }
  out.state = state;
  return out;
}

double state_difference(const ModelState& a, const ModelState& b) {
  double worst = 0;
  REQUIRE(a.size() == b.size());
  for (size_t l = 0; l < a.size(); ++l) {
    REQUIRE(a[l].pos == b[l].pos);
    REQUIRE(a[l].tensors.size() == b[l].tensors.size());
    for (const auto& kv : a[l].tensors) worst = std::max(worst, test::max_rel_err(kv.second, b[l].tensors.at(kv.first)));
  }
  return worst;
}

}  // namespace static_decode_test

using namespace static_decode_test;

TEST_CASE("static decode step (bench's captured decode, run eagerly) gives the model's own greedy tokens and state "
          "(fp64), and refuses a model whose decode reads the host's position",
          "[decode][cuda_graph]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  auto prompt = torch::randint(48, {1, 9});
  for (const std::string family : {"gated_deltanet", "deltanet", "gla", "mamba2", "linear_attn", "rwkv7", "kda",
                                    "gated_deltaproduct", "mamba3", "mesa_net", "log_linear_gdn", "log_linear_mamba2",
                                    "titans_lmm"}) {
    CAPTURE(family);
    auto model = test::small_model(family, 32, 48, 3);  // d 32: Mamba2's d_inner 64, one head of 64
    REQUIRE(model->decode_step_is_static());
    // Titans: 4 persistent + 9 prompt + 51 decoded tokens end its 64-token chunk, where the anchor moves.
    const int64_t n = family == "titans_lmm" ? 51 : 12;
    const auto eager = decode(*model, prompt, n, false, false, torch::kCPU);
    const auto stat = decode(*model, prompt, n, true, false, torch::kCPU);
    REQUIRE(stat.tokens == eager.tokens);
    REQUIRE(state_difference(stat.state, eager.state) < 1e-12);
  }
  for (const std::string family : {"transformer", "retnet", "titans_mag", "hope"}) {
    CAPTURE(family);
    auto model = test::small_model(family, 16, 48, 3);
    REQUIRE_FALSE(model->decode_step_is_static());
    REQUIRE_THROWS_WITH(decode(*model, prompt, 2, true, false, torch::kCPU), Catch::Contains("static decode"));
  }
}

TEST_CASE("cuda: a decode step captured as a CUDA graph gives the eager decode's tokens and state",
          "[.cuda-decode_graph]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  auto prompt = torch::randint(48, {1, 33});
  for (const std::string family : {"gated_deltanet", "gla", "mamba2", "linear_attn", "rwkv7", "kda",
                                    "gated_deltaproduct", "mamba3", "mesa_net", "log_linear_gdn", "log_linear_mamba2",
                                    "titans_lmm"}) {
    CAPTURE(family);
    auto model = test::small_model(family, 64, 48, 3);
    model->to(cuda);
    const int64_t n = family == "titans_lmm" ? 40 : 24;  // Titans: 4 + 33 + 40 tokens cross its 64-token chunk
    const auto eager = decode(*model, prompt, n, false, false, cuda);
    const auto graphed = decode(*model, prompt, n, true, true, cuda);
    REQUIRE(graphed.tokens == eager.tokens);
    REQUIRE(state_difference(graphed.state, eager.state) < 1e-5);
  }
}
