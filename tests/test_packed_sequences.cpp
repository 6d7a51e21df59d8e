// Packed sequences (runtime/packed_sequences.h, docs/models.md#packed-sequences): N sequences back to back along one
// time axis, each read from the initial state. Checked here: the bounds and the padded groups; the short conv and
// every mixer's packed form against each sequence run on its own (fp64, outputs and every gradient, under the
// host-form scope that takes a CPU test down the route a GPU takes); a whole model through both routes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/layers.h"
#include "runtime/model.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"
#include "tests/mixer_test_util.h"
#include "tests/model_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;

namespace packed_sequences_test {

constexpr int64_t kPackedWidth = 16, kPackedHeads = 2;
// Three sequences of 6, 10 and 1 tokens: with chunks of 4 the first two end inside a chunk and the second starts
// inside one; the last is a single token.
const std::vector<int64_t> kPackedBounds = {0, 6, 16, 17};

// The mixer's stateless forward of each sequence alone, concatenated along time: [1, N, D].
torch::Tensor one_by_one(Mixer& m, const torch::Tensor& x, const PackedSequences& s) {
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < s.count(); ++i) parts.push_back(m.forward(x.narrow(1, s.bounds[size_t(i)], s.length(i)), nullptr));
  return torch::cat(parts, 1);
}

// Gradients of <y, w> with respect to x and every parameter of `m` (cloned; the module's are cleared after).
std::vector<torch::Tensor> gradients(torch::nn::Module& m, const torch::Tensor& x, const torch::Tensor& y,
                                     const torch::Tensor& w) {
  for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
  if (x.grad().defined()) x.mutable_grad() = torch::Tensor();
  (y * w).sum().backward();
  std::vector<torch::Tensor> g{x.grad().clone()};
  for (auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

}  // namespace packed_sequences_test

using namespace packed_sequences_test;

TEST_CASE("packed sequences: bounds from sequence starts, positions inside each sequence, padded groups that hold "
          "every token once",
          "[packed]") {
  auto starts = torch::zeros({2, 8}, torch::kBool);
  starts[0][3] = true;  // row 0: 3 + 5 tokens
  starts[1][5] = true;  // row 1: 5 + 1 + 2 tokens
  starts[1][6] = true;
  starts[1][0] = true;  // a BOS at position 0 starts the row's sequence, as position 0 always does
  const auto s = PackedSequences::from_starts(starts, torch::kCPU);
  REQUIRE(s.bounds == std::vector<int64_t>{0, 3, 8, 13, 14, 16});
  REQUIRE(s.count() == 5);
  REQUIRE(s.max_length() == 5);
  REQUIRE(torch::equal(s.cu_seqlens, torch::tensor(std::vector<int32_t>{0, 3, 8, 13, 14, 16}, torch::kInt32)));
  REQUIRE(torch::equal(s.positions,
                       torch::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 0, 1})));

  // Lengths 5, 5, 3, 2, 1: groups {5, 5, 3} padded to 5 and {2, 1} padded to 2 (no member below half the longest).
  const auto buckets = padded_buckets(s, torch::kCPU);
  REQUIRE(buckets.size() == 2);
  REQUIRE((buckets[0].rows == 3 && buckets[0].length == 5));
  REQUIRE((buckets[1].rows == 2 && buckets[1].length == 2));
  int64_t padded = 0;
  std::vector<torch::Tensor> packed;
  for (const auto& b : buckets) {
    padded += b.rows * b.length;
    // The slots that hold real tokens read exactly those tokens; the others read the padding slot `total`.
    REQUIRE(torch::equal(b.gather.index_select(0, b.scatter), b.packed));
    REQUIRE((b.gather == s.total()).sum().item<int64_t>() == b.rows * b.length - b.packed.size(0));
    packed.push_back(b.packed);
  }
  REQUIRE(padded - s.total() <= s.total());
  auto all = torch::cat(packed);
  REQUIRE(torch::equal(std::get<0>(all.sort()), torch::arange(s.total())));
  REQUIRE(torch::equal(all.index_select(0, unbucket_permutation(buckets, s.total())), torch::arange(s.total())));

  REQUIRE_THROWS_WITH(PackedSequences::from_bounds({0, 3, 3}, torch::kCPU), Catch::Contains("cu_seqlens[2] = 3"));
  REQUIRE_THROWS_WITH(PackedSequences::from_bounds({1, 3}, torch::kCPU), Catch::Contains("start at 0"));
}

TEST_CASE("packed sequences: the short conv restarts at every sequence", "[packed]") {
  const auto s = PackedSequences::from_bounds(kPackedBounds, torch::kCPU);
  ShortConv conv(6, 4, /*silu=*/true);
  conv->to(torch::kFloat64);
  auto x = test::randn_f64({1, s.total(), 6});
  auto packed = conv->forward_packed(x, s);
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < s.count(); ++i) parts.push_back(conv->forward(x.narrow(1, s.bounds[size_t(i)], s.length(i))));
  REQUIRE(test::max_rel_err(packed, torch::cat(parts, 1)) < 1e-15);
}

TEST_CASE("packed sequences: every mixer's packed form equals each sequence on its own (fp64: outputs, the input's "
          "and every parameter's gradient)",
          "[packed][contract]") {
  const auto s = PackedSequences::from_bounds(kPackedBounds, torch::kCPU);
  // Without the scope a CPU tensor takes the padded groups (the tensor chunk forms).
  REQUIRE_FALSE(test::make_mixer("gated_deltanet", kPackedWidth, kPackedHeads, json::object(), 3)
                    ->packs_sequences(test::randn_f64({1, 4, kPackedWidth})));
  const PackedHostFormsScope host_forms;
  std::vector<std::string> packing;
  for (const auto& name : Registry::instance().mixer_names()) {
    auto m = test::make_mixer(name, kPackedWidth, kPackedHeads, test::contract_args(name), 3);
    auto x = test::randn_f64({1, s.total(), kPackedWidth}).requires_grad_(true);
    if (!m->packs_sequences(x)) continue;
    CAPTURE(name);
    packing.push_back(name);
    auto w = test::randn_f64({1, s.total(), kPackedWidth});
    auto y = m->forward_packed(x, s);
    auto g = gradients(*m, x, y, w);
    auto y_ref = one_by_one(*m, x, s);
    auto g_ref = gradients(*m, x, y_ref, w);
    REQUIRE(test::max_rel_err(y, y_ref) < 1e-12);
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(i);
      REQUIRE(test::max_rel_err(g[i], g_ref[i], 1e-8) < 1e-10);
    }
  }
  for (const char* expected :
       {"deltanet", "gated_deltanet", "gated_deltaproduct", "mom", "gla", "hgrn2", "linear_attn", "linear_attn_elu",
        "retnet", "mamba2", "mamba", "mamba3", "transformer", "swa"}) {
    CAPTURE(expected);
    REQUIRE(std::find(packing.begin(), packing.end(), expected) != packing.end());
  }
}

TEST_CASE("packed sequences: a model's forward over documents packed in rows equals each document on its own, by "
          "padded groups and by the packed forms, with the same gradients",
          "[packed]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  torch::manual_seed(5);
  const int64_t V = 40, B = 2, T = 12;
  auto ids = torch::randint(V, {B, T});
  auto starts = torch::zeros({B, T}, torch::kBool);
  starts[0][4] = starts[0][5] = starts[1][7] = true;  // row 0: 4 + 1 + 7 tokens, row 1: 7 + 5
  const std::vector<std::vector<int64_t>> docs = {{0, 0, 4}, {0, 4, 5}, {0, 5, 12}, {1, 0, 7}, {1, 7, 12}};
  // Attention, a recurrent family, a layer that hands values to later layers and has a token-shift FFN (RWKV-7), an
  // auxiliary loss (MoM), the continuum memory FFN (Hope).
  for (const std::string family : {"transformer", "gated_deltanet", "rwkv7", "mom", "hope"}) {
    CAPTURE(family);
    auto model = test::small_model(family, 16, V, 7);
    model->to(torch::kFloat64);
    REQUIRE_FALSE(model->packs_sequences(ids));
    auto logits = model->forward_packed(ids, starts);
    REQUIRE(logits.sizes() == std::vector<int64_t>{B, T, V});
    for (const auto& d : docs) {
      CAPTURE(d[0], d[1]);
      auto alone = model->forward(ids[d[0]].slice(0, d[1], d[2]).unsqueeze(0))[0];
      REQUIRE(test::max_rel_err(logits[d[0]].slice(0, d[1], d[2]), alone) < 1e-12);
    }
    if (family == "mom") REQUIRE(model->aux_loss().defined());
  }

  // Gated DeltaNet through its packed form (host forms) and through padded groups: same logits and gradients.
  auto model = test::small_model("gated_deltanet", 16, V, 9);
  model->to(torch::kFloat64);
  auto grads = [&](const torch::Tensor& logits) {
    model->zero_grad();
    logits.pow(2).mean().backward();
    std::vector<torch::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto padded = model->forward_packed(ids, starts);
  auto g_padded = grads(padded);
  const PackedHostFormsScope host_forms;
  REQUIRE(model->packs_sequences(ids));
  auto packed = model->forward_packed(ids, starts);
  auto g_packed = grads(packed);
  REQUIRE(test::max_rel_err(packed, padded) < 1e-12);
  REQUIRE(test::max_rel_err_all(g_packed, g_padded) < 1e-10);

  // The papers' hybrids of these with sliding-window attention take the one-row route too, and so does MoM (each
  // memory's routed stream a packed batch of its own).
  for (const std::string family : {"gdn_h1", "samba", "mom", "hgrn2"}) {
    CAPTURE(family);
    auto hybrid = test::small_model(family, 32, V, 11);  // d 32: Mamba2's d_inner 64, one head of 64
    hybrid->to(torch::kFloat64);
    REQUIRE(hybrid->packs_sequences(ids));
    auto logits = hybrid->forward_packed(ids, starts);
    for (const auto& d : docs) {
      CAPTURE(d[0], d[1]);
      auto alone = hybrid->forward(ids[d[0]].slice(0, d[1], d[2]).unsqueeze(0))[0];
      REQUIRE(test::max_rel_err(logits[d[0]].slice(0, d[1], d[2]), alone) < 1e-12);
    }
  }

  REQUIRE_THROWS_WITH(model->forward_packed(ids, starts.narrow(1, 0, 5)), Catch::Contains("sequence starts"));
}
