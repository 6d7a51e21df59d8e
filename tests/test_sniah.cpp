#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "engine/tools/report_catalog.h"
#include "reports/report.h"
#include "engine/evaluation/evaluate.h"
#include "engine/evaluation/model_adapter.h"
#include "results/db.h"
#include "runtime/generation.h"
#include "runtime/model.h"
#include "tasks/eval_task.h"
#include "tasks/sniah.h"
#include "test_util.h"

using namespace mnemo;

namespace {
std::shared_ptr<SniahTask> make_sniah(int variant, json overrides = json::object()) {
  auto task = TaskRegistry::instance().make("sniah_" + std::to_string(variant), overrides);
  auto s = std::dynamic_pointer_cast<SniahTask>(task);
  REQUIRE(s);
  return s;
}

// A small SentencePiece model trained once for the S-NIAH length tests.
std::string small_sp_model() {
  static const std::string model = [] {
    const auto dir = test::temp_dir("sniah_sp");
    const std::string text = read_text_file(data_path("haystack/pg_essays/worked.txt"));
    const std::string input = (dir / "essay.txt").string();
    std::ofstream(input) << text;
    SentencePieceTrainOptions o;
    o.inputs = {input};
    o.vocab_size = 400;
    o.out_prefix = (dir / "sniah").string();
    return train_sentencepiece(o);
  }();
  return model;
}

LanguageModel tiny_model(int64_t vocab) {
  torch::manual_seed(0);
  return LanguageModel(model_config_from_json(
      {{"model", "transformer"}, {"vocab_size", vocab}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 2}}));
}
}  // namespace

TEST_CASE("RULER depths are round(linspace(0, 100, 40))", "[sniah]") {
  const auto& d = ruler_depths();
  REQUIRE(d.size() == 40);
  CHECK(d.front() == 0);
  CHECK(d[1] == 3);
  CHECK(d[20] == 51);
  CHECK(d.back() == 100);
}

TEST_CASE("S-NIAH samples: template, needle, key and value formats", "[sniah]") {
  const std::regex number("[1-9][0-9]{6}");
  const std::regex uuid("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  for (int v = 1; v <= 3; ++v) {
    auto task = make_sniah(v, {{"length", 1024}});
    CHECK(task->essay_haystack() == (v != 1));
    const std::string type = v == 3 ? "uuid" : "number";
    std::set<std::string> values;
    for (int64_t i = 0; i < 8; ++i) {
      const auto s = task->make_sample(Split::test, i, 42, 1024, -1, ByteTokenizer());
      CHECK(std::regex_match(s.value, v == 3 ? uuid : number));
      values.insert(s.value);
      CHECK(s.key.find('-') != std::string::npos);
      CHECK(s.input.rfind("A special magic " + type + " is hidden within the following text. Make sure to memorize "
                          "it. I will quiz you about the " + type + " afterwards.\n", 0) == 0);
      const std::string suffix = "\nWhat is the special magic " + type + " for " + s.key +
                                 " mentioned in the provided text? The special magic " + type + " for " + s.key +
                                 " mentioned in the provided text is";
      REQUIRE(s.input.size() > suffix.size());
      CHECK(s.input.compare(s.input.size() - suffix.size(), suffix.size(), suffix) == 0);
      CHECK(s.input.find("One of the special magic " + type + "s for " + s.key + " is: " + s.value + ".") !=
            std::string::npos);
      if (v == 1) CHECK(s.input.find("The grass is green. The sky is blue.") != std::string::npos);
      CHECK(s.depth >= 0);
      CHECK(s.depth <= 100);
    }
    CHECK(values.size() == 8);
  }
}

TEST_CASE("S-NIAH prompts fill their length budget exactly", "[sniah]") {
  auto sp = load_tokenizer(small_sp_model());
  ByteTokenizer byte;
  for (int v = 1; v <= 3; ++v) {
    auto task = make_sniah(v);
    for (const Tokenizer* tok : {static_cast<const Tokenizer*>(&byte), static_cast<const Tokenizer*>(sp.get())}) {
      for (int64_t length : {640, 1500}) {
        for (int64_t depth : {-1, 0, 57, 100}) {
          const int64_t budget = length - 128;
          const auto s = task->make_sample(Split::test, depth + 1, 7, length, depth, *tok);
          INFO("sniah_" << v << " " << tok->id() << " length " << length << " depth " << depth);
          // Fits, and one more haystack unit would not.
          CHECK(s.input_tokens == prompt_token_count(*tok, s.input));
          CHECK(s.input_tokens <= budget);
          const std::string again = task->build_input(s.haystack_units, s.key, s.value, s.build_depth,
                                                      s.noise_position);
          CHECK(again == s.input);
          const std::string bigger = task->build_input(s.haystack_units + 1, s.key, s.value, s.build_depth,
                                                       s.noise_position);
          CHECK(prompt_token_count(*tok, bigger) > budget);
          CHECK(s.haystack_units > 0);
          if (depth >= 0) CHECK(s.depth == depth);
        }
      }
    }
  }
}

TEST_CASE("S-NIAH needle depth places the needle along the context", "[sniah]") {
  auto task = make_sniah(2, {{"length", 2048}});
  ByteTokenizer tok;
  const auto first = task->make_sample(Split::test, 0, 1, 2048, 0, tok);
  const auto last = task->make_sample(Split::test, 0, 1, 2048, 100, tok);
  const auto mid = task->make_sample(Split::test, 0, 1, 2048, 50, tok);
  auto where = [](const SniahSample& s) {
    return static_cast<double>(s.input.find("One of the special magic")) / static_cast<double>(s.input.size());
  };
  CHECK(first.input.find("afterwards.\n One of the special magic") != std::string::npos);  // RULER's join
  CHECK(where(first) < 0.1);
  CHECK(where(last) > 0.85);
  CHECK(where(mid) > 0.35);
  CHECK(where(mid) < 0.65);
  // The key and value depend on the sample index only, not on the depth (paired cells).
  CHECK(first.key == last.key);
  CHECK(first.value == last.value);
}

TEST_CASE("S-NIAH generation is deterministic and rows carry targets and metadata", "[sniah]") {
  auto task = make_sniah(3, {{"length", 600}, {"with_ids", true}});
  const auto a = task->generate_rows(Split::test, 3, 11);
  const auto b = task->generate_rows(Split::test, 3, 11);
  const auto c = task->generate_rows(Split::test, 3, 12);
  const auto train = task->generate_rows(Split::train, 3, 11);
  REQUIRE(a.size() == 3);
  CHECK(a == b);
  CHECK(a[0]["target"] != c[0]["target"]);
  CHECK(a[0]["target"] != train[0]["target"]);
  CHECK(a[1]["target"] == c[0]["target"]);  // sample seed = seed + index
  for (const auto& row : a) {
    CHECK(row["task"] == "sniah_3");
    CHECK(row["outputs"].size() == 1);
    CHECK(row["outputs"][0] == row["target"]);
    CHECK(row["length"] == 600);
    CHECK(row["input_tokens"].get<int64_t>() <= 600 - 128);
    CHECK(row["input_ids"].size() == row["input_tokens"].get<size_t>());
    CHECK(row["tokenizer"] == "byte");
    CHECK(row["haystack"] == "essay:PaulGrahamEssays");
    CHECK(row.contains("depth"));
  }
  CHECK_THROWS_WITH(make_sniah(1, {{"depth", 101}}), Catch::Contains("depth"));
  CHECK_THROWS_WITH(make_sniah(1, {{"length", 100}}), Catch::Contains("tokens_to_generate"));
  CHECK_THROWS_AS(make_sniah(1, {{"length", 200}})->make_sample(Split::test, 0, 0, 200, -1, ByteTokenizer()), Error);
}

TEST_CASE("S-NIAH training examples label only the answer", "[sniah]") {
  auto task = make_sniah(1, {{"length", 600}});
  CHECK(task->seq_len() == 600);
  CHECK(task->vocab_size() == 258);
  ByteTokenizer tok;
  const auto exs = task->examples(Split::train, 2, 3);
  REQUIRE(exs.size() == 2);
  for (const auto& ex : exs) {
    REQUIRE(ex.input_ids.size() == 600);
    REQUIRE(ex.labels.size() == 600);
    std::vector<int64_t> answer;
    for (auto l : ex.labels)
      if (l != kIgnoreLabel) answer.push_back(l);
    REQUIRE(answer.back() == tok.eos_id());
    answer.pop_back();
    CHECK(tok.decode(answer) == " " + ex.meta["target"].get<std::string>());
    CHECK(ex.input_ids[0] == tok.bos_id());
  }
}

TEST_CASE("greedy generation with the decode state equals re-running the full prefix", "[sniah]") {
  auto model = tiny_model(258);
  model->eval();
  const std::vector<int64_t> prompt = {256, 'a', 'b', 'c', ' ', 'x', 'y'};
  const auto fast = greedy_generate(*model, prompt, 12, {}, torch::kCPU);
  REQUIRE(fast.size() == 12);
  std::vector<int64_t> seq = prompt, slow;
  torch::NoGradGuard guard;
  for (int i = 0; i < 12; ++i) {
    auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
    const int64_t next = model->forward(ids).select(1, seq.size() - 1).argmax(-1).item<int64_t>();
    slow.push_back(next);
    seq.push_back(next);
  }
  CHECK(fast == slow);
  // Chunked prefill gives the same tokens; a stop id ends generation before it.
  GenerationOptions o;
  o.max_new_tokens = 12;
  o.prefill_chunk = 3;
  CHECK(greedy_generate(*model, prompt, o, torch::kCPU) == fast);
  const auto stopped = greedy_generate(*model, prompt, 12, {fast[3]}, torch::kCPU);
  CHECK(stopped.size() <= 3);
  CHECK_THROWS_AS(greedy_generate(*model, {}, 4, {}, torch::kCPU), Error);
  CHECK_THROWS_AS(greedy_generate(*model, {999}, 4, {}, torch::kCPU), Error);
}

TEST_CASE("S-NIAH evaluate writes one result per (length, depth) cell", "[sniah]") {
  auto model = tiny_model(258);
  auto task = make_sniah(1, {{"length", 520}, {"tokens_to_generate", 8}});
  const auto dir = test::temp_dir("sniah_eval");
  ResultsDB db((dir / "r.sqlite").string());
  LanguageModelAdapter adapter(*model, torch::kCPU);
  EvalContext ctx(adapter);
  ctx.record = eval_rows_sink(db, "transformer", "ckpt");
  ctx.options = {{"lengths", "460,520"}, {"depths", {0, 100}}, {"n", 2}};
  const json out = evaluate_generation_task(*task, ctx);
  REQUIRE(out["cells"].size() == 4);
  const auto rows = db.evals("sniah_1");
  REQUIRE(rows.size() == 4);
  for (const auto& r : rows) {
    CHECK(r.metric == "string_match_all");
    CHECK(r.n == 2);
    CHECK(r.model == "transformer");
    CHECK(r.value >= 0);
    CHECK(r.value <= 100);
    const json setting = json::parse(r.setting_json);
    CHECK(setting.contains("length"));
    CHECK(setting.contains("depth"));
    CHECK(json::parse(r.details_json)["samples"].size() == 2);
  }
  // The report section: heatmap + accuracy-vs-length figures and a table.
  const std::string md = read_text_file(write_report(db, (dir / "report").string(), report_catalog()));
  CHECK(md.find("## S-NIAH") != std::string::npos);
  CHECK(md.find("sniah_1_heatmap.png") != std::string::npos);
  CHECK(md.find("sniah_1_vs_length.png") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "report" / "figures" / "sniah_1_heatmap.svg"));
  // A tokenizer larger than the model's vocabulary is refused.
  auto small = tiny_model(100);
  LanguageModelAdapter small_adapter(*small, torch::kCPU);
  EvalContext bad(small_adapter);
  bad.options = {{"n", 1}};
  CHECK_THROWS_WITH(evaluate_generation_task(*task, bad), Catch::Contains("vocab_size"));
  mnemo::test::remove_dir_tree(dir);
}
