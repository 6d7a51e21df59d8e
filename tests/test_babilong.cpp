#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "engine/tools/report_catalog.h"
#include "reports/report.h"
#include "engine/evaluation/evaluate.h"
#include "engine/evaluation/model_adapter.h"
#include "results/db.h"
#include "runtime/model.h"
#include "tasks/babi.h"
#include "tasks/babilong.h"
#include "tasks/scoring.h"
#include "tasks/text_utils.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {
std::shared_ptr<BabilongTask> make_babilong(int t, json overrides = json::object()) {
  auto task = std::dynamic_pointer_cast<BabilongTask>(
      TaskRegistry::instance().make("babilong_qa" + std::to_string(t), overrides));
  REQUIRE(task);
  return task;
}
}  // namespace

TEST_CASE("bAbI parsing: 1000 questions in every en/ test file", "[babilong]") {
  for (int t = 1; t <= 20; ++t) {
    const std::string file = babi_task_file(t, Split::test, "babi/en");
    const auto& samples = load_babi_file(file);
    INFO(file);
    CHECK(samples.size() == 1000);
    for (const auto& s : samples) {
      REQUIRE(!s.question.empty());
      REQUIRE(!s.answer.empty());
      REQUIRE(s.facts.size() == s.fact_ids.size());
      REQUIRE(s.references.size() <= s.supporting_ids.size());
    }
  }
  const auto& qa1 = load_babi_file(babi_task_file(1, Split::test, "babi/en"));
  CHECK(qa1[0].facts == std::vector<std::string>{"John travelled to the hallway.", "Mary journeyed to the bathroom."});
  CHECK(qa1[0].question == "Where is John?");
  CHECK(qa1[0].answer == "hallway");
  CHECK(qa1[0].supporting_ids == std::vector<int64_t>{1});
  CHECK(qa1[0].references == std::vector<std::string>{"John travelled to the hallway."});
  // Earlier questions are dropped from later samples' facts.
  CHECK(qa1[1].facts.size() == 4);
  CHECK(qa1[1].answer == "bathroom");
  CHECK(qa1.back().story == 199);
  // qa8 has comma-separated multi-object answers.
  bool multi = false;
  for (const auto& s : load_babi_file(babi_task_file(8, Split::test, "babi/en")))
    multi = multi || s.answer.find(',') != std::string::npos;
  CHECK(multi);
}

TEST_CASE("bAbI files: qa3 train falls back to en/, bad input is an Error", "[babilong]") {
  bool fallback = false;
  const std::string f = babi_task_file(3, Split::train, "babi/en-10k", &fallback);
  CHECK(fallback);
  CHECK(f.find("en/qa3_three-supporting-facts_train.txt") != std::string::npos);
  babi_task_file(1, Split::train, "babi/en-10k", &fallback);
  CHECK_FALSE(fallback);
  CHECK_THROWS_WITH(parse_babi("1 Mary went home.\nx Where?\tthere\t1\n", "bad.txt"), Catch::Contains("bad.txt:2"));
  CHECK_THROWS_WITH(parse_babi("2 Mary went home.\n", "bad.txt"), Catch::Contains("ID 1"));
  CHECK_THROWS_AS(parse_babi("1 Mary went home.\n", "none.txt"), Error);
  CHECK_THROWS_AS(babi_task_file(21, Split::test, "babi/en"), Error);
}

TEST_CASE("Gutenberg header/footer stripping matches the corpus manifest", "[babilong]") {
  const std::string alice = read_text_file(data_path("corpus/gutenberg/pg11_alices_adventures_in_wonderland.txt"));
  CHECK(gutenberg_body_range(alice) == std::pair<size_t, size_t>{638, 148519});
  const std::string crusoe = read_text_file(data_path("corpus/gutenberg/pg521_the_life_and_adventures_of_robinson.txt"));
  CHECK(gutenberg_body_range(crusoe) == std::pair<size_t, size_t>{719, 634188});  // wrapped START marker
  const std::string body = gutenberg_body(crusoe);
  CHECK(body.find('\r') == std::string::npos);
  CHECK(body.find("PROJECT GUTENBERG EBOOK") == std::string::npos);
  CHECK(body.find("Project Gutenberg") == std::string::npos);
  CHECK(gutenberg_body("plain\r\ntext") == "plain\ntext");
  CHECK(gutenberg_body_range("no markers") == std::pair<size_t, size_t>{0, 0});
}

TEST_CASE("sentence splitter keeps abbreviations and initials together", "[babilong]") {
  CHECK(split_sentences("Mr. Smith went home. He slept!  Did he? Yes.") ==
        std::vector<std::string>{"Mr. Smith went home.", "He slept!", "Did he?", "Yes."});
  CHECK(split_sentences("J. R. Tolkien wrote it. \"Really?\" she asked. It was 3.5 miles.") ==
        std::vector<std::string>{"J. R. Tolkien wrote it.", "\"Really?\"", "she asked.", "It was 3.5 miles."});
  CHECK(split_sentences("He saw etc. and left. Then the end.") ==
        std::vector<std::string>{"He saw etc. and left.", "Then the end."});
  CHECK(split_sentences("no end") == std::vector<std::string>{"no end"});
  CHECK(split_sentences("  ").empty());
}

TEST_CASE("BABILong assembly hides the facts in order within the token budget", "[babilong]") {
  ByteTokenizer tok;
  const auto& pool = load_babi_file(babi_task_file(2, Split::test, "babi/en"));
  auto corpus = TextCorpus::open("corpus/gutenberg");
  CHECK(corpus->size() == 111);
  CHECK(corpus->label() == "gutenberg");
  for (uint64_t seed = 0; seed < 5; ++seed) {
    SampleRng rng(seed);
    const auto s = assemble_babilong_sample(pool, corpus.get(), tok, 1700, rng);
    CHECK(s.context_tokens <= 1700);
    CHECK(s.context_tokens >= 1690);
    CHECK(static_cast<int64_t>(s.facts.size()) <= 1700 / 8);
    CHECK(std::is_sorted(s.fact_positions.begin(), s.fact_positions.end()));
    size_t at = 0;
    for (const auto& f : s.facts) {  // every fact, in story order
      const auto p = s.context.find(f, at);
      REQUIRE(p != std::string::npos);
      at = p + f.size();
    }
    CHECK(s.context.find(s.question) == std::string::npos);
  }
  // Length 0: the facts only.
  SampleRng rng(3);
  const auto facts_only = assemble_babilong_sample(pool, nullptr, tok, 0, rng);
  std::string joined;
  for (const auto& f : facts_only.facts) joined += (joined.empty() ? "" : " ") + f;
  CHECK(facts_only.context == joined);
  SampleRng rng2(3);
  CHECK_THROWS_WITH(assemble_babilong_sample(pool, corpus.get(), tok, 16, rng2), Catch::Contains("larger length"));
}

TEST_CASE("BABILong rows are deterministic and carry question, target and metadata", "[babilong]") {
  auto task = make_babilong(1, {{"length", 800}});
  const auto a = task->generate_rows(Split::test, 3, 5);
  CHECK(a == task->generate_rows(Split::test, 3, 5));
  CHECK(a != task->generate_rows(Split::test, 3, 6));
  for (const auto& row : a) {
    CHECK(row["task"] == "babilong_qa1");
    CHECK(row["haystack"] == "gutenberg");
    CHECK(row["length"] == 800);
    CHECK(row["sample_size"] == 500);
    CHECK(row["context_tokens"].get<int64_t>() <= 500);
    const std::string input = row["input"];
    CHECK(input == row["context"].get<std::string>() + "\nQuestion: " + row["question"].get<std::string>() +
                       "\nAnswer:");
    CHECK_FALSE(row["target"].get<std::string>().empty());
    CHECK(row["babi_file"] == "qa1_single-supporting-fact_test.txt");
  }
  // Prompted format with and without instruction/examples (booydar/babilong prompts).
  auto prompted = make_babilong(1, {{"length", 0}, {"format", "prompted"}});
  const std::string full = prompted->generate_rows(Split::test, 1, 0)[0]["input"];
  CHECK(full.rfind("I will give you context with the facts about positions", 0) == 0);
  CHECK(full.find("<example>") != std::string::npos);
  CHECK(full.find("Always return your answer") != std::string::npos);
  CHECK(full.find("<context>\n") != std::string::npos);
  CHECK(full.find("\n</context>\n\nQuestion: Where is") != std::string::npos);
  auto bare = make_babilong(1, {{"length", 0}, {"format", "prompted"}, {"with_instruction", false},
                                {"with_examples", false}, {"with_post_prompt", false}});
  const std::string bare_input = bare->generate_rows(Split::test, 1, 0)[0]["input"];
  CHECK(bare_input.rfind("<context>\n", 0) == 0);
  CHECK(bare_input.find("<example>") == std::string::npos);
  // A user corpus: any text file, results labelled with its name.
  const auto dir = test::temp_dir("babilong_corpus");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "The lighthouse keeper counted " + std::to_string(i) + " ships that night. ";
  std::ofstream(dir / "my_noise.txt") << text;
  auto custom = make_babilong(1, {{"length", 600}, {"corpus", (dir / "my_noise.txt").string()}});
  const auto row = custom->generate_rows(Split::test, 1, 0)[0];
  CHECK(row["haystack"] == "my_noise");
  CHECK(row["context"].get<std::string>().find("lighthouse keeper") != std::string::npos);
  CHECK_THROWS_WITH(make_babilong(1, {{"length", 200}}), Catch::Contains("prompt_reserve"));
  CHECK_THROWS_WITH(make_babilong(1, {{"mode", "fuzzy"}}), Catch::Contains("fuzzy"));
  CHECK_THROWS_WITH(make_babilong(1, {{"corpus", "/no/such/corpus"}})->generate_rows(Split::test, 1, 0),
                    Catch::Contains("/no/such/corpus"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("BABILong training examples: fixed length, labels on the answer only", "[babilong]") {
  auto task = make_babilong(2, {{"length", 512}});
  CHECK(task->seq_len() == 512);
  CHECK(task->vocab_size() == 258);
  ByteTokenizer tok;
  const auto exs = task->examples(Split::train, 3, 1);
  REQUIRE(exs.size() == 3);
  for (const auto& ex : exs) {
    REQUIRE(ex.input_ids.size() == 512);
    REQUIRE(ex.labels.size() == 512);
    std::vector<int64_t> answer;
    for (auto l : ex.labels)
      if (l != kIgnoreLabel) answer.push_back(l);
    REQUIRE(answer.back() == tok.eos_id());
    answer.pop_back();
    CHECK(tok.decode(answer) == " " + ex.meta["target"].get<std::string>());
  }
  // The prompted format overflows the 300-token reserve: the context shrinks to fit.
  auto prompted = make_babilong(1, {{"length", 1400}, {"format", "prompted"}});
  const auto p = prompted->examples(Split::train, 1, 0);
  CHECK(p[0].input_ids.size() == 1400);
}

TEST_CASE("BABILong evaluate and mnemo score / generate", "[babilong]") {
  torch::manual_seed(0);
  auto model = LanguageModel(model_config_from_json(
      {{"model", "transformer"}, {"vocab_size", 258}, {"d_model", 32}, {"n_layers", 1}, {"n_heads", 2}}));
  auto task = make_babilong(1, {{"length", 0}, {"max_new_tokens", 4}});
  const auto dir = test::temp_dir("babilong_eval");
  ResultsDB db((dir / "r.sqlite").string());
  LanguageModelAdapter adapter(*model, torch::kCPU);
  EvalContext ctx(adapter);
  ctx.record = eval_rows_sink(db, "transformer", "");
  ctx.options = {{"lengths", {0, 400}}, {"n", 2}};
  const json out = evaluate_generation_task(*task, ctx);
  REQUIRE(out["cells"].size() == 2);
  const auto rows = db.evals("babilong_qa1");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].metric == "accuracy");
  CHECK(json::parse(rows[1].setting_json)["haystack"] == "gutenberg");
  CHECK(json::parse(rows[0].setting_json)["haystack"] == "none");

  const std::string md = read_text_file(write_report(db, (dir / "report").string(), report_catalog()));
  CHECK(md.find("## BABILong") != std::string::npos);
  CHECK(md.find("haystack gutenberg") != std::string::npos);

  // `mnemo score` on hand-made predictions.
  const auto preds = dir / "preds.jsonl";
  {
    std::ofstream f(preds);
    f << json{{"prediction", " kitchen."}, {"target", "kitchen"}, {"question", "Where is Mary?"}}.dump() << "\n";
    f << json{{"prediction", "kitchen or office"}, {"target", "kitchen"}, {"question", "Where is Mary?"}}.dump()
      << "\n";
  }
  auto r = test::run_mnemo("score --task babilong_qa1 --predictions " + preds.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(json::parse(r.output)["value"] == 50.0);
  r = test::run_mnemo("score --task babilong_qa1 --mode substring --predictions " + preds.string());
  CHECK(json::parse(r.output)["value"] == 100.0);
  {
    std::ofstream f(dir / "sniah.jsonl");
    f << json{{"prediction", " 1234567."}, {"outputs", {"1234567"}}}.dump() << "\n";
    f << json{{"prediction", " 7654321"}, {"target", "1234567"}}.dump() << "\n";
  }
  r = test::run_mnemo("score --task sniah_2 --predictions " + (dir / "sniah.jsonl").string());
  CHECK(json::parse(r.output) == json{{"task", "sniah_2"}, {"metric", "string_match_all"}, {"n", 2}, {"value", 50.0}});
  {
    std::ofstream f(dir / "bad.jsonl");
    f << json{{"prediction", "x"}}.dump() << "\n";
  }
  r = test::run_mnemo("score --task babilong_qa1 --predictions " + (dir / "bad.jsonl").string());
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("bad.jsonl:1") != std::string::npos);

  // `mnemo generate` for both task kinds.
  r = test::run_mnemo("generate babilong_qa8 --length 700 --n 2 --seed 1 --split test --out " +
                      (dir / "b.jsonl").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  r = test::run_mnemo("generate sniah_1 --length 1024 --tokenizer byte --n 2 --out " + (dir / "s.jsonl").string());
  REQUIRE(r.exit_code == 0);
  std::ifstream in(dir / "s.jsonl");
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    CHECK(row["input_tokens"].get<int64_t>() <= 1024 - 128);
    ++count;
  }
  CHECK(count == 2);
  mnemo::test::remove_dir_tree(dir);
}
