#include <catch2/catch.hpp>

#include <cmath>

#include "engine/config/run_config.h"
#include "runtime/attention/attention.h"
#include "runtime/layers.h"
#include "runtime/model.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {
// Textbook softmax attention with an explicit loop over queries (fp64).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  int64_t window) {
  const int64_t T = q.size(2);
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < T; ++i) {
    int64_t lo = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
    auto kk = k.slice(2, lo, i + 1), vv = v.slice(2, lo, i + 1);
    auto s = torch::matmul(q.slice(2, i, i + 1), kk.transpose(-1, -2)) / std::sqrt(double(q.size(3)));
    rows.push_back(torch::matmul(torch::softmax(s, -1), vv));
  }
  return torch::cat(rows, 2);
}
}  // namespace

TEST_CASE("blocked attention equals a naive reference (fp64)", "[attention]") {
  torch::manual_seed(0);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({2, 3, 37, 8}, opts), k = torch::randn({2, 3, 37, 8}, opts), v = torch::randn({2, 3, 37, 8}, opts);
  for (int64_t block : {1, 5, 16, 64}) {
    auto full = blocked_attention(q, k, v, 0, 0, 0, block);
    REQUIRE(max_rel_err(full, reference_attention(q, k, v, 0)) < 1e-12);
    REQUIRE(max_rel_err(full, naive_attention(q, k, v, 0, 0, 0)) < 1e-12);
  }
}

TEST_CASE("sliding-window attention equals masked full attention", "[attention]") {
  torch::manual_seed(1);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({1, 2, 50, 8}, opts), k = torch::randn({1, 2, 50, 8}, opts), v = torch::randn({1, 2, 50, 8}, opts);
  for (int64_t W : {1, 4, 13, 50, 80}) {
    for (int64_t block : {3, 16, 256}) {
      auto swa = blocked_attention(q, k, v, 0, 0, W, block);
      REQUIRE(max_rel_err(swa, reference_attention(q, k, v, W)) < 1e-12);
    }
  }
  // W >= T is full attention; W = 1 attends to self only (output = v).
  REQUIRE(max_rel_err(blocked_attention(q, k, v, 0, 0, 80, 16), blocked_attention(q, k, v, 0, 0, 0, 16)) < 1e-12);
  REQUIRE(max_rel_err(blocked_attention(q, k, v, 0, 0, 1, 16), v) < 1e-12);
}

TEST_CASE("RoPE preserves norms, is relative, and starts at the identity", "[attention][rope]") {
  torch::manual_seed(2);
  auto x = torch::randn({1, 2, 10, 16}, torch::kFloat64);
  auto r = apply_rope(x, 0);
  REQUIRE(max_rel_err(r.norm(2, -1), x.norm(2, -1)) < 1e-12);  // rotation
  REQUIRE(max_rel_err(r.select(2, 0), x.select(2, 0)) < 1e-15);  // position 0 = identity
  // <R_m q, R_n k> depends only on m - n.
  auto q = torch::randn({1, 1, 1, 16}, torch::kFloat64), k = torch::randn({1, 1, 1, 16}, torch::kFloat64);
  auto dot = [&](int64_t m, int64_t n) { return (apply_rope(q, m) * apply_rope(k, n)).sum().item<double>(); };
  REQUIRE(std::abs(dot(5, 2) - dot(13, 10)) < 1e-10);
  REQUIRE(std::abs(dot(7, 7) - (q * k).sum().item<double>()) < 1e-10);
  // Offsets: rope on a slice with offset == slice of rope on the whole.
  REQUIRE(max_rel_err(apply_rope(x.slice(2, 4, 10), 4), r.slice(2, 4, 10)) < 1e-12);
}

namespace {
LanguageModel tiny_model(const std::string& model, json extra = json::object()) {
  json flat = {{"model", model}, {"vocab_size", 50}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4}};
  flat.update(extra);
  torch::manual_seed(3);
  LanguageModel m(model_config_from_json(flat));
  m->to(torch::kFloat64);
  m->eval();
  return m;
}

void check_decode_equals_forward(LanguageModel& m, int64_t T, int64_t prefill) {
  torch::NoGradGuard g;
  auto ids = torch::randint(0, 50, {2, T}, torch::kInt64);
  auto full = m->forward(ids);
  ModelState st = m->initial_state();
  std::vector<torch::Tensor> outs = {m->forward(ids.slice(1, 0, prefill), &st)};
  for (int64_t t = prefill; t < T; ++t) outs.push_back(m->forward(ids.slice(1, t, t + 1), &st));
  auto inc = torch::cat(outs, 1);
  REQUIRE(max_rel_err(inc, full) < 1e-10);
}
}  // namespace

TEST_CASE("transformer: prefill + token-by-token decode equals the full forward", "[attention][decode]") {
  auto m = tiny_model("transformer");
  check_decode_equals_forward(m, 20, 7);
  check_decode_equals_forward(m, 9, 1);
  auto gqa = tiny_model("transformer", {{"n_kv_heads", 2}});
  check_decode_equals_forward(gqa, 12, 3);
}

TEST_CASE("transformer with a short conv on q/k/v: causal, decode == forward, the conv is trained",
          "[attention][decode]") {
  auto m = tiny_model("transformer", {{"short_conv", true}, {"conv_size", 3}, {"n_kv_heads", 2}});
  check_decode_equals_forward(m, 20, 7);
  check_decode_equals_forward(m, 9, 1);
  ModelState st = m->initial_state();
  {
    torch::NoGradGuard g;
    m->forward(torch::randint(0, 50, {1, 5}, torch::kInt64), &st);
  }
  REQUIRE(st[0].tensors.at("conv_k").size(2) == 2);  // the last K-1 = 2 projected keys
  // Causal: a changed token t leaves the logits before t unchanged.
  torch::NoGradGuard g;
  auto ids = torch::randint(1, 50, {1, 12}, torch::kInt64);
  auto ids2 = ids.clone();
  ids2[0][6] = 0;
  auto a = m->forward(ids), b = m->forward(ids2);
  REQUIRE(max_rel_err(a.narrow(1, 0, 6), b.narrow(1, 0, 6)) <= 1e-12);
  REQUIRE(max_rel_err(a.narrow(1, 6, 6), b.narrow(1, 6, 6)) > 1e-6);
  // The conv weights are parameters (the default transformer has none).
  int convs = 0;
  for (const auto& p : m->named_parameters()) convs += p.key().find("_conv.weight") != std::string::npos;
  REQUIRE(convs == 3 * 2);  // q, k, v in each of the two layers
  int plain = 0;
  for (const auto& p : tiny_model("transformer")->named_parameters()) plain += p.key().find("_conv") != std::string::npos;
  REQUIRE(plain == 0);
  REQUIRE_THROWS_WITH(tiny_model("transformer", {{"short_conv", true}, {"conv_size", 0}}),
                      Catch::Contains("conv_size must be >= 1"));
}

TEST_CASE("swa: ring-buffer decode equals the full forward, across the window boundary", "[attention][decode]") {
  for (int64_t W : {1, 3, 8}) {
    auto m = tiny_model("swa", {{"window", W}});
    check_decode_equals_forward(m, 21, 5);
    check_decode_equals_forward(m, 21, 1);
    // chunked prefill: several multi-token calls
    torch::NoGradGuard g;
    auto ids = torch::randint(0, 50, {1, 20}, torch::kInt64);
    auto full = m->forward(ids);
    ModelState st = m->initial_state();
    auto a = m->forward(ids.slice(1, 0, 6), &st), b = m->forward(ids.slice(1, 6, 13), &st),
         c = m->forward(ids.slice(1, 13, 20), &st);
    REQUIRE(max_rel_err(torch::cat({a, b, c}, 1), full) < 1e-10);
    REQUIRE(st[0].tensors.at("k_ring").size(2) == W);  // memory O(W), not O(T)
  }
}

TEST_CASE("SwiGLU hidden size follows fla's rule", "[layers]") {
  REQUIRE(swiglu_hidden_size(1024, 4) == 2816);
  REQUIRE(swiglu_hidden_size(1024, 3) == 2048);
  REQUIRE(swiglu_hidden_size(64, 4) == 256);
}

TEST_CASE("short conv with a cache equals the full causal conv", "[layers]") {
  torch::manual_seed(4);
  ShortConv conv(6, 4);
  conv->to(torch::kFloat64);
  auto x = torch::randn({2, 11, 6}, torch::kFloat64);
  auto full = conv(x);
  LayerState st;
  std::vector<torch::Tensor> outs = {conv(x.slice(1, 0, 2), &st)};
  for (int t = 2; t < 11; ++t) outs.push_back(conv(x.slice(1, t, t + 1), &st));
  REQUIRE(max_rel_err(torch::cat(outs, 1), full) < 1e-12);
  // causality: changing x at t=5 leaves outputs < 5 unchanged
  auto x2 = x.clone();
  x2.select(1, 5).add_(1.0);
  REQUIRE(max_rel_err(conv(x2).slice(1, 0, 5), full.slice(1, 0, 5)) < 1e-15);
}

TEST_CASE("attention without RoPE (use_rope false) reads a set of keys (the order of earlier tokens does not change "
          "a query's output), as kimi_linear's attention layers do",
          "[attention][nope]") {
  auto attention = [](bool rope) {
    json flat = {{"model", "transformer"}, {"d_model", 16}, {"n_heads", 2}, {"n_layers", 1}, {"use_rope", rope}};
    torch::manual_seed(3);
    LanguageModel model(model_config_from_json(flat));
    model->to(torch::kFloat64);
    return model;
  };
  torch::manual_seed(4);
  auto ids = torch::randint(50, {1, 7}, torch::kInt64);
  auto swapped = ids.clone();
  swapped.index_put_({0, 2}, ids.index({0, 4}));
  swapped.index_put_({0, 4}, ids.index({0, 2}));
  torch::NoGradGuard no_grad;
  for (bool rope : {false, true}) {
    auto model = attention(rope);
    // The block's SwiGLU is per token: the last position's logits depend on the earlier tokens through attention only.
    const double d = max_rel_err(model->forward(swapped).select(1, 6), model->forward(ids).select(1, 6));
    INFO("use_rope " << rope << ": " << d);
    if (rope) CHECK(d > 1e-6);
    else CHECK(d <= 1e-12);
  }
  // Kimi Linear: three KDA layers to one attention layer, which has no RoPE.
  const json run = resolve_run_config({{"model", "kimi_linear"}, {"task", "mqar"}});
  CHECK(run.at("use_rope") == false);
  ModelConfig mc = model_config_from_json({{"model", "kimi_linear"}, {"n_layers", 8}, {"use_rope", false}});
  CHECK(mc.layer_mixers() == std::vector<std::string>{"kda", "kda", "kda", "transformer", "kda", "kda", "kda",
                                                      "transformer"});
  CHECK(mc.layer_args(3).at("use_rope") == false);
  CHECK_FALSE(mc.layer_args(0).contains("use_rope"));
}
