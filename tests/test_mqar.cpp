#include <catch2/catch.hpp>

#include <map>
#include <set>

#include <torch/torch.h>

#include "synthetic/mqar.h"
#include "tasks/task.h"

using namespace mnemo;

TEST_CASE("MQAR examples follow Zoology's layout", "[mqar]") {
  MqarParams p;
  p.vocab_size = 128;
  p.seq_len = 64;
  p.num_kv_pairs = 8;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto ex = mqar_example(p, seed);
    REQUIRE(ex.input_ids.size() == 64);
    REQUIRE(ex.labels.size() == 64);
    std::set<int64_t> keys, values;
    for (int i = 0; i < 8; ++i) {
      int64_t k = ex.input_ids[2 * i], v = ex.input_ids[2 * i + 1];
      REQUIRE(k >= 1);
      REQUIRE(k < 64);
      REQUIRE(v >= 64);
      REQUIRE(v < 128);
      keys.insert(k);
      values.insert(v);
    }
    REQUIRE(keys.size() == 8);  // drawn without replacement
    REQUIRE(values.size() == 8);
    int labelled = 0;
    for (int t = 0; t < 64; ++t) {
      if (ex.labels[t] == kIgnoreLabel) continue;
      ++labelled;
      REQUIRE(t >= 16);            // queries only after the context
      REQUIRE((t - 16) % 2 == 0);  // at even query offsets
      // the input at a labelled position is a key; the label is that key's value
      int64_t key = ex.input_ids[t];
      bool found = false;
      for (int i = 0; i < 8; ++i)
        if (ex.input_ids[2 * i] == key) {
          REQUIRE(ex.labels[t] == ex.input_ids[2 * i + 1]);
          found = true;
        }
      REQUIRE(found);
    }
    REQUIRE(labelled == 8);
    for (int t = 16; t < 64; ++t)  // filler stays 0 without random_non_queries
      if (ex.labels[t] == kIgnoreLabel) REQUIRE(ex.input_ids[t] == 0);
  }
}

TEST_CASE("MQAR is deterministic by seed and train/test seeds are disjoint", "[mqar]") {
  MqarParams p;
  auto a = mqar_example(p, 7), b = mqar_example(p, 7), c = mqar_example(p, 8);
  REQUIRE(a.input_ids == b.input_ids);
  REQUIRE(a.labels == b.labels);
  REQUIRE(a.input_ids != c.input_ids);
  std::set<uint64_t> train, test;
  for (int i = 0; i < 1000; ++i) {
    train.insert(example_seed(Split::train, 123, i));
    test.insert(example_seed(Split::test, 123, i));
  }
  for (auto s : test) REQUIRE(train.count(s) == 0);
  for (auto s : train) REQUIRE(s < (uint64_t{1} << 31));
  for (auto s : test) REQUIRE(s >= (uint64_t{1} << 31));
}

TEST_CASE("MQAR query gaps follow the power law (early gaps favoured)", "[mqar]") {
  MqarParams p;
  p.vocab_size = 512;
  p.seq_len = 256;
  p.num_kv_pairs = 4;
  int early = 0, late = 0;
  for (uint64_t s = 0; s < 400; ++s) {
    auto ex = mqar_example(p, s);
    for (int t = 8; t < 256; ++t)
      if (ex.labels[t] != kIgnoreLabel) ((t - 8) / 2 < 31 ? early : late)++;
  }
  // p(g) ∝ (g+1)^(-0.99) over 124 gaps: the first quarter holds most of the mass.
  REQUIRE(early > late);
}

TEST_CASE("MQAR random_non_queries fills the filler and validates constraints", "[mqar]") {
  MqarParams p;
  p.random_non_queries = true;
  auto ex = mqar_example(p, 3);
  int zeros = 0;
  for (auto t : ex.input_ids) zeros += t == 0;
  REQUIRE(zeros < 5);
  MqarParams bad = p;
  bad.seq_len = 63;
  REQUIRE_THROWS_AS(validate(bad), Error);
  bad = p;
  bad.num_kv_pairs = 20;  // 4N > L
  REQUIRE_THROWS_WITH(validate(bad), Catch::Contains("too short"));
  bad = p;
  bad.vocab_size = 64;  // V must exceed L
  REQUIRE_THROWS_AS(validate(bad), Error);
}

TEST_CASE("Task registry resolves parameters and rejects unknown ones", "[mqar][tasks]") {
  auto& reg = TaskRegistry::instance();
  auto t = reg.make("mqar", {{"seq_len", 128}, {"num_kv_pairs", 8}});
  REQUIRE(t->params()["seq_len"] == 128);
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"seq_length", 128}}), Catch::Contains("unknown parameter 'seq_length'"));
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"seq_len", "long"}}), Catch::Contains("seq_len"));
  REQUIRE_THROWS_WITH(reg.make("nope", {}), Catch::Contains("unknown task 'nope'"));
}

namespace {
// An induction oracle that only remembers the first `remembered` key-value pairs of the context:
// at a position holding one of those keys it predicts that key's value, elsewhere token 0 (never
// a value). On an example with N pairs it is right on min(remembered, N) of its N queries.
torch::Tensor partial_oracle_logits(const torch::Tensor& input_ids, int64_t vocab, int64_t remembered) {
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  auto ids = input_ids.cpu();
  auto logits = torch::zeros({B, T, vocab});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      int64_t predicted = 0;
      const int64_t tok = ids[b][t].item<int64_t>();
      for (int64_t i = 0; i < remembered && 2 * i + 1 < t; ++i)
        if (tok != 0 && ids[b][2 * i].item<int64_t>() == tok) predicted = ids[b][2 * i + 1].item<int64_t>();
      logits[b][t][predicted] = 1.0;
    }
  return logits;
}
}  // namespace

TEST_CASE("MQAR mixture: Zoology's training mix and per-N_KV test slices", "[mqar][tasks]") {
  auto& reg = TaskRegistry::instance();
  auto task = std::dynamic_pointer_cast<TokenTask>(
      reg.make("mqar", {{"vocab_size", 128}, {"seq_len", 64}, {"train_num_kv_pairs", {4, 8, 16}},
                        {"train_kv_weights", {2, 1, 1}}, {"test_num_kv_pairs", {4, 8, 16}}}));
  REQUIRE(task);

  // Training examples: N_KV drawn with probability 1/2, 1/4, 1/4; each example has that many pairs.
  std::map<int64_t, int> counts;
  for (const TokenExample& ex : task->examples(Split::train, 4000, 7)) {
    const int64_t n = ex.meta.at("num_kv_pairs").get<int64_t>();
    ++counts[n];
    int labelled = 0;
    for (int64_t l : ex.labels) labelled += l != kIgnoreLabel;
    REQUIRE(labelled == n);
    REQUIRE(ex.input_ids.size() == 64);
  }
  REQUIRE(counts.size() == 3);
  CHECK(counts[4] == Approx(2000).margin(120));
  CHECK(counts[8] == Approx(1000).margin(100));
  CHECK(counts[16] == Approx(1000).margin(100));

  // Test examples cycle through the slices; the slice metric is each slice's mean accuracy.
  const auto test = task->examples(Split::test, 30, 7);
  for (size_t i = 0; i < test.size(); ++i)
    REQUIRE(test[i].meta.at("num_kv_pairs").get<int64_t>() == std::vector<int64_t>{4, 8, 16}[i % 3]);
  const json m = task->test_metrics([](const torch::Tensor& x) { return partial_oracle_logits(x, 128, 4); }, test,
                                    torch::kCPU);
  CHECK(m.at("accuracy_nkv4").get<double>() == Approx(1.0));
  CHECK(m.at("accuracy_nkv8").get<double>() == Approx(0.5));
  CHECK(m.at("accuracy_nkv16").get<double>() == Approx(0.25));

  // Without the lists the task is unchanged: no meta, no slice metrics, the same examples as before.
  auto plain = std::dynamic_pointer_cast<TokenTask>(reg.make("mqar", {{"vocab_size", 128}, {"seq_len", 64}}));
  MqarParams p;
  p.vocab_size = 128;
  p.seq_len = 64;
  REQUIRE(plain->examples(Split::train, 1, 3)[0].input_ids == mqar_example(p, example_seed(Split::train, 3, 0)).input_ids);
  REQUIRE(plain->examples(Split::train, 1, 3)[0].meta.is_null());
  REQUIRE(plain->test_metrics([](const torch::Tensor& x) { return partial_oracle_logits(x, 128, 4); },
                              plain->examples(Split::test, 3, 0), torch::kCPU)
              .empty());

  // Bad lists are refused with the key and the value.
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"seq_len", 64}, {"test_num_kv_pairs", {4, 32}}}),
                      Catch::Contains("test_num_kv_pairs entry 32"));
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"train_num_kv_pairs", {4, 8}}, {"train_kv_weights", {1}}}),
                      Catch::Contains("train_kv_weights has 1 entries for 2"));
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"train_num_kv_pairs", {4, 8}}, {"train_kv_weights", {1, -1}}}),
                      Catch::Contains("positive numbers"));
  REQUIRE_THROWS_WITH(reg.make("mqar", {{"train_num_kv_pairs", {"4"}}}), Catch::Contains("must hold integers"));
}
