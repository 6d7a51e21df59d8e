#include <catch2/catch.hpp>

#include <set>

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
