// Zero-shot tasks at lm-eval parity: one test per rule, then parity with lm-eval's own outputs
// (tests/data/harness/, produced by running lm-evaluation-harness's functions; see the README there).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "tasks/harness/aggregation.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/harness/py_compat.h"
#include "tasks/harness/request.h"
#include "tasks/harness/task_common.h"
#include "tasks/tokenizer.h"
#include "tests/file_util.h"
#include "file_util.h"

using namespace mnemo;
using namespace mnemo::harness;
namespace fs = std::filesystem;
using test::ScopedDataDir;

namespace {
const std::string kFixtures = std::string(MNEMO_SOURCE_DIR) + "/tests/data/harness/";

std::vector<json> fixture_jsonl(const std::string& name) {
  std::vector<json> out;
  for (auto& r : parse_jsonl(read_text_file(kFixtures + name), name)) out.push_back(std::move(r.value));
  return out;
}

fs::path temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("mnemo_harness_" + name + "_" + std::to_string(::getpid()));
  mnemo::test::remove_dir_tree(p);
  fs::create_directories(p);
  return p;
}



json arguments_of(const std::vector<Request>& reqs) {
  json a = json::array();
  for (const auto& r : reqs) a.push_back(r.arguments);
  return a;
}

std::vector<Response> responses_of(const json& resps) {
  std::vector<Response> out;
  for (const auto& r : resps) {
    Response x;
    if (r.is_array()) {
      x.ll = r[0].get<double>();
      x.is_greedy = r[1].get<bool>();
    } else {
      x.ll = r.get<double>();
    }
    out.push_back(x);
  }
  return out;
}

bool close_rel(double a, double b, double tol) { return std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b)); }

// lm-eval's old evaluator order (random.Random(42).shuffle of the documents), all request arguments as
// json.dumps writes them, hashed — what lm-eval stored under tests/testdata/<task>-v<N>-loglikelihood*.
std::string lm_eval_request_hash(const HarnessTask& task) {
  std::vector<int64_t> order(static_cast<size_t>(task.num_docs()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  py::Random(42).shuffle(order);
  json all = json::array();
  for (int64_t i : order)
    for (const auto& r : task.requests(i)) all.push_back(r.arguments);
  return sha256_hex(py::json_dumps(all, true));
}
}  // namespace

// ---------------------------------------------------------------- rules

TEST_CASE("encode_pair moves the context's trailing whitespace into the continuation", "[harness]") {
  ByteTokenizer tok;
  auto [ctx, cont] = encode_pair(tok, "Answer: \n", "yes", false);
  CHECK(ctx == tok.encode("Answer:"));
  CHECK(cont == tok.encode(" \nyes"));
  // str.rstrip's whitespace is Unicode: a no-break space moves too.
  std::tie(ctx, cont) = encode_pair(tok, "A\xC2\xA0", "b", true);
  CHECK(ctx == std::vector<int64_t>{256, 'A'});  // add_bos: BOS first
  CHECK(cont == std::vector<int64_t>{0xC2, 0xA0, 'b'});
}

TEST_CASE("encode_pair takes the continuation after len(encode(context)), merges across the seam included",
          "[harness]") {
  const fs::path dir = temp_dir("sp");
  std::string corpus;
  for (int i = 0; i < 400; ++i) corpus += "foobar foo the foobar bar baz foo foobar\n";
  test::write_text_file(dir / "corpus.txt", corpus);
  SentencePieceTrainOptions opt;
  opt.inputs = {(dir / "corpus.txt").string()};
  opt.vocab_size = 32;
  opt.model_type = "bpe";
  opt.out_prefix = (dir / "sp").string();
  SentencePieceTokenizer tok(train_sentencepiece(opt));
  const auto whole = tok.encode("the foobar baz");
  const auto ctx_only = tok.encode("the foo");
  REQUIRE(tok.decode({whole[1]}) == "foobar");  // one piece spans the seam "foo|bar"
  const auto [ctx, cont] = encode_pair(tok, "the foo", "bar baz", false);
  CHECK(ctx == ctx_only);
  CHECK(cont == std::vector<int64_t>(whole.begin() + static_cast<long>(ctx_only.size()), whole.end()));
  CHECK(tok.decode(cont) == "baz");  // lm-eval's reference behaviour: "bar" went into the merged piece
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("an empty context becomes the prefix token", "[harness]") {
  ByteTokenizer tok;
  auto [ctx, cont] = encode_pair(tok, "", "abc", false);
  CHECK(ctx == std::vector<int64_t>{256});
  CHECK(cont == std::vector<int64_t>{'a', 'b', 'c'});
  CHECK(prefix_token(tok) == 256);
  ByteTokenizer plain(false);
  CHECK_THROWS_WITH(encode_pair(plain, "", "abc", false), Catch::Contains("neither BOS nor EOS"));
  CHECK(request_type_name(RequestType::loglikelihood_rolling) == "loglikelihood_rolling");
}

TEST_CASE("acc_norm divides by the choice's characters, not bytes or tokens", "[harness]") {
  const std::vector<MetricSpec> m = {{"acc", "mean", true}, {"acc_norm", "mean", true}};
  // "ab": 2 characters, 2 bytes; "\xC3\xA9" (é): 1 character, 2 bytes. By characters: -0.5 vs -0.6 -> choice 0;
  // by bytes it would be -0.5 vs -0.3 -> choice 1.
  const auto r = multiple_choice_results({"ab", "\xC3\xA9"}, 0, {{-1.0, false, ""}, {-0.6, false, ""}}, m, "t");
  CHECK(r["acc"] == 0.0);
  CHECK(r["acc_norm"] == 1.0);
}

TEST_CASE("ties go to the lowest index (numpy argmax)", "[harness]") {
  const std::vector<MetricSpec> m = {{"acc", "mean", true}, {"acc_norm", "mean", true}};
  const std::vector<Response> tie = {{-2.0, false, ""}, {-2.0, false, ""}, {-2.0, false, ""}};
  CHECK(multiple_choice_results({"a", "b", "c"}, 0, tie, m, "t")["acc"] == 1.0);
  CHECK(multiple_choice_results({"a", "b", "c"}, 1, tie, m, "t")["acc"] == 0.0);
  // equal per-character scores: acc_norm picks the first too
  const auto r = multiple_choice_results({"a", "bb"}, 0, {{-1.0, false, ""}, {-2.0, false, ""}}, m, "t");
  CHECK(r["acc_norm"] == 1.0);
  CHECK(py::argmax({1.0, 3.0, 3.0}) == 1);
  CHECK(py::argmax({1.0, std::nan(""), 5.0}) == 1);  // a NaN wins where it first appears
  // a gold outside the choices scores 0 (lm-eval: -100)
  CHECK(multiple_choice_results({"a", "b"}, 7, {{-1.0, false, ""}, {-2.0, false, ""}}, m, "t")["acc"] == 0.0);
}

TEST_CASE("WinoGrande scores the shared continuation after each substituted context", "[harness]") {
  auto task = make_harness_task("winogrande");
  REQUIRE(task->num_docs() == 1267);
  const auto reqs = task->requests(0);
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].arguments == std::vector<std::string>{"Sarah was a much better surgeon than Maria so Sarah",
                                                       " always got the easier cases."});
  CHECK(reqs[1].arguments[0] == "Sarah was a much better surgeon than Maria so Maria");
  CHECK(reqs[1].arguments[1] == reqs[0].arguments[1]);
  // lm-eval's own schema: contexts = sentence[:idx] + option, continuation = sentence[idx+1:].strip()
  const json doc = {{"sentence", "The trophy doesn't fit into the suitcase because _ is too large. "},
                    {"option1", "the trophy"}, {"option2", "the suitcase"}, {"answer", "1"}};
  CHECK(task->target(doc) == "is too large.");
  CHECK(task->process_results(doc, {{-3.0, false, ""}, {-4.0, false, ""}})["acc"] == 1.0);
  CHECK(task->process_results(doc, {{-5.0, false, ""}, {-4.0, false, ""}})["acc"] == 0.0);
}

TEST_CASE("rolling windows carry one token of context, as lm-eval's get_rolling_token_windows", "[harness]") {
  // lm-eval tests/test_utils.py test_get_rolling_token_windows_v1 (after make_disjoint_window)
  std::vector<int64_t> x(34);
  for (int i = 0; i < 34; ++i) x[i] = i;
  const auto w = rolling_windows(x, -100, 10, 1);
  REQUIRE(w.size() == 4);
  CHECK(w[0].first == std::vector<int64_t>{-100});
  CHECK(w[1].first == std::vector<int64_t>{9});
  CHECK(w[1].second.front() == 10);
  CHECK(w[3].first == std::vector<int64_t>{23, 24, 25, 26, 27, 28, 29});
  CHECK(w[3].second == std::vector<int64_t>{30, 31, 32, 33});
  CHECK_THROWS(rolling_windows(x, -100, 10, 0));
  // every case of the fixture, computed by lm-eval's functions
  for (const auto& c : fixture_jsonl("rolling_windows.jsonl")) {
    std::vector<int64_t> toks(c["n"].get<size_t>());
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int64_t>(i);
    const auto got = rolling_windows(toks, c["prefix_token"], c["max_seq_len"], c["context_len"]);
    json g = json::array();
    for (const auto& [a, b] : got) g.push_back({a, b});
    INFO("n=" << c["n"] << " max_seq_len=" << c["max_seq_len"] << " context_len=" << c["context_len"]);
    CHECK(g == c["windows"]);
  }
}

TEST_CASE("WikiText counts words and bytes on the original page, not the detokenised one", "[harness]") {
  const std::string page = " = T = \n \n a @-@ b , c ( d ) \n";
  CHECK(wikitext_detokenize(page) == " = T =\n\na-b, c (d)\n");
  auto task = make_harness_task("wikitext");
  const json r = task->process_results({{"page", page}}, {{-10.0, false, ""}});
  CHECK(r["word_perplexity"] == json::array({-10.0, py::count_split_whitespace(page)}));
  CHECK(py::count_split_whitespace(page) == 13);  // len(re.split(r"\s+", page)): 11 tokens + 2 empty ends
  CHECK(r["byte_perplexity"][1] == static_cast<int64_t>(page.size()));
  REQUIRE(task->num_docs() == 62);  // lm-eval's 62 test documents
  int64_t words = 0, bytes = 0;
  for (int64_t i = 0; i < task->num_docs(); ++i) {
    const json m = task->process_results(task->doc(i), {{-1.0, false, ""}});
    words += m["word_perplexity"][1].get<int64_t>();
    bytes += m["bits_per_byte"][1].get<int64_t>();
  }
  CHECK(words == 241335);  // docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext
  CHECK(bytes == 1290527);
}

TEST_CASE("LAMBADA perplexity is exp of minus the mean document log-likelihood", "[harness]") {
  auto task = make_harness_task("lambada_openai");
  const auto reqs = task->requests(0);
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].arguments[1] == " signs");
  const json m = task->process_results(task->doc(0), {{-2.5, true, ""}});
  CHECK(m["perplexity"] == -2.5);
  CHECK(m["acc"] == 1);
  const std::vector<json> lls = {-1.0, -2.0, -6.0};
  CHECK(aggregate("perplexity", lls) == Approx(std::exp(3.0)).epsilon(1e-15));
}

TEST_CASE("aggregations and mean_stderr are lm-eval's", "[harness]") {
  const std::vector<json> acc = {1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0};
  const json ref = read_json_file(kFixtures + "aggregates.json")["tasks"]["_mean_stderr_example"];
  CHECK(aggregate("mean", acc) == ref["mean"].get<double>());
  CHECK(close_rel(aggregate_stderr("mean", acc), ref["stderr"].get<double>(), 1e-15));
  CHECK(std::isnan(aggregate_stderr("mean", {1.0})));  // n = 1: "N/A"
  CHECK(std::isnan(aggregate_stderr("mean", acc, 0)));  // bootstrap_iters = 0: "N/A"
  const std::vector<json> wb = {json::array({-10.0, 4}), json::array({-6.0, 4})};
  CHECK(aggregate("weighted_perplexity", wb) == Approx(std::exp(2.0)).epsilon(1e-15));
  CHECK(aggregate("bits_per_byte", wb) == Approx(2.0 / std::log(2.0)).epsilon(1e-15));
  CHECK(std::isnan(aggregate_stderr("weighted_perplexity", wb)));  // not bootstrappable in lm-eval
  CHECK_THROWS_WITH(aggregate("median", acc), Catch::Contains("unknown aggregation"));
  // CPython's random stream (random.Random(42).random(), random.Random(0).random())
  CHECK(py::Random(42).random() == 0.6394267984578837);
  CHECK(py::Random(0).random() == 0.8444218515250481);
  CHECK(py::json_dumps(json::array({"a\"\n\xC3\xA9\xF0\x9F\x98\x80", 3})) == "[\"a\\\"\\n\\u00e9\\ud83d\\ude00\", 3]");
}

TEST_CASE("a malformed record is an Error naming file:line and the field", "[harness]") {
  CHECK_THROWS_WITH(parse_jsonl("{\"a\": 1}\n{\"a\": \n", "x.jsonl"), Catch::Contains("x.jsonl:2"));
  const fs::path dir = temp_dir("bad");
  ScopedDataDir scoped(dir);
  const std::string good = read_text_file(kFixtures + "hellaswag_val_sample.jsonl");
  const std::string first = good.substr(0, good.find('\n') + 1);
  test::write_text_file(dir / "eval/hellaswag/hellaswag_val.jsonl", first + "{\"ind\": 1, \"ctx_b\": \"x\"}\n");
  CHECK_THROWS_WITH(make_harness_task("hellaswag")->num_docs(),
                    Catch::Contains("eval/hellaswag/hellaswag_val.jsonl:2") && Catch::Contains("ctx_a"));
  test::write_text_file(dir / "eval/hellaswag/hellaswag_val.jsonl", first + "{not json\n");
  CHECK_THROWS_WITH(make_harness_task("hellaswag")->num_docs(), Catch::Contains("hellaswag_val.jsonl:2"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a missing or altered data file is an Error naming it and what is expected", "[harness]") {
  const fs::path dir = temp_dir("missing");
  ScopedDataDir scoped(dir);
  CHECK_THROWS_WITH(make_harness_task("commonsense_qa")->num_docs(),
                    Catch::Contains("eval/commonsense_qa/validation.jsonl"));
  test::write_text_file(dir / "eval/piqa/valid.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n");
  CHECK_THROWS_WITH(make_harness_task("piqa")->num_docs(),
                    Catch::Contains("valid.jsonl") &&
                        Catch::Contains("93503cc97c679e459b065c3d13e848282e44b2a25213985bed3e5d458abef72d"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("task registry: names, groups and close-name suggestions", "[harness]") {
  const auto names = harness_task_names();
  for (const char* n : {"piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "social_iqa", "boolq",
                        "openbookqa", "commonsense_qa", "lambada_openai", "wikitext"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  for (const auto& n : names) CHECK(make_harness_task(n)->name() == n);
  CHECK(expand_harness_tasks({"commonsense"}) ==
        std::vector<std::string>{"wikitext", "lambada_openai", "piqa", "hellaswag", "winogrande", "arc_easy",
                                 "arc_challenge", "social_iqa", "boolq"});
  CHECK(expand_harness_tasks({"commonsense_lattice"}).size() == 7);
  CHECK(expand_harness_tasks({"piqa, arc_easy", "piqa"}) == std::vector<std::string>{"piqa", "arc_easy"});
  CHECK_THROWS_WITH(make_harness_task("piqaa"), Catch::Contains("did you mean: piqa"));
  CHECK_THROWS_WITH(expand_harness_tasks({"commonsens"}), Catch::Contains("commonsense"));
  CHECK_THROWS(expand_harness_tasks({" , "}));
}

TEST_CASE("shipped data files carry their lm-eval comparability flag", "[harness]") {
  for (const auto& [name, same] : std::vector<std::pair<std::string, bool>>{
           {"piqa", true}, {"winogrande", true}, {"openbookqa", true}, {"wikitext", true}, {"commonsense_qa", true},
           {"arc_easy", false}, {"arc_challenge", false}, {"boolq", false}, {"lambada_openai", false},
           {"hellaswag", false}, {"social_iqa", false}}) {
    const json files = make_harness_task(name)->data_files();
    INFO(name << ": " << files.dump());
    CHECK(files[0]["matches_reference"] == same);
    CHECK(files[0]["sha256"].get<std::string>().size() == 64);
  }
}

// ---------------------------------------------------------------- parity with lm-eval's outputs

TEST_CASE("requests equal lm-eval's, string for string (first documents)", "[harness]") {
  for (const std::string name : {"piqa", "winogrande", "openbookqa", "arc_easy", "arc_challenge", "boolq",
                                 "lambada_openai", "wikitext"}) {
    auto task = make_harness_task(name);
    for (const auto& row : fixture_jsonl("requests_" + name + ".jsonl")) {
      INFO(name << " doc " << row["doc_id"]);
      CHECK(arguments_of(task->requests(row["doc_id"].get<int64_t>())) == row["arguments"]);
    }
  }
}

TEST_CASE("HellaSwag's importer applies lm-eval's process_docs to the original schema", "[harness]") {
  const fs::path dir = temp_dir("hellaswag");
  ScopedDataDir scoped(dir);
  test::write_text_file(dir / "eval/hellaswag/hellaswag_val.jsonl", read_text_file(kFixtures + "hellaswag_val_sample.jsonl"));
  auto task = make_harness_task("hellaswag");
  for (const auto& row : fixture_jsonl("requests_hellaswag.jsonl")) {
    INFO("doc " << row["doc_id"]);
    CHECK(arguments_of(task->requests(row["doc_id"].get<int64_t>())) == row["arguments"]);
  }
  CHECK(hellaswag_preprocess("  a [title] b [x] c  [y]\n[z ]d ") == "a. b c \nd");
  CHECK(hellaswag_preprocess("a [b\nc] d [e]") == "a [b\nc] d ");  // "." stops at a newline
  // not the reference file (different SHA-256): flagged, not refused
  CHECK(task->data_files()[0]["matches_reference"] == false);
  // lm-eval's process_results on the same documents and responses (ties included)
  std::vector<json> acc_norm;
  for (const auto& row : fixture_jsonl("scoring_hellaswag.jsonl")) {
    const json got = task->process_results(task->doc(row["doc_id"]), responses_of(row["resps"]));
    INFO("doc " << row["doc_id"]);
    CHECK(got == row["metrics"]);
    acc_norm.push_back(got["acc_norm"]);
  }
  const json ref = read_json_file(kFixtures + "aggregates.json")["tasks"]["hellaswag"]["acc_norm"];
  CHECK(close_rel(aggregate("mean", acc_norm), ref["value"].get<double>(), 1e-12));
  CHECK(close_rel(aggregate_stderr("mean", acc_norm), ref["stderr"].get<double>(), 1e-12));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("process_results and aggregation equal lm-eval's for the same responses", "[harness]") {
  const json agg = read_json_file(kFixtures + "aggregates.json");
  const int64_t iters = agg["bootstrap_iters"];
  for (const std::string name : {"piqa", "arc_easy", "arc_challenge", "openbookqa", "boolq", "winogrande",
                                 "lambada_openai", "wikitext"}) {
    auto task = make_harness_task(name);
    std::map<std::string, std::vector<json>> values;
    for (const auto& row : fixture_jsonl("scoring_" + name + ".jsonl")) {
      const json got = task->process_results(task->doc(row["doc_id"]), responses_of(row["resps"]));
      INFO(name << " doc " << row["doc_id"] << ": " << got.dump() << " vs " << row["metrics"].dump());
      REQUIRE(got.size() == row["metrics"].size());
      for (const auto& [k, v] : row["metrics"].items()) {
        if (v.is_array()) {
          CHECK(got[k][0].get<double>() == v[0].get<double>());
          CHECK(got[k][1].get<double>() == v[1].get<double>());
        } else {
          CHECK(got[k].get<double>() == v.get<double>());
        }
        values[k].push_back(got[k]);
      }
    }
    for (const auto& m : task->metrics()) {
      const json& ref = agg["tasks"][name][m.name];
      INFO(name << " " << m.name);
      REQUIRE(ref["aggregation"] == m.aggregation);
      CHECK(close_rel(aggregate(m.aggregation, values[m.name]), ref["value"].get<double>(), 1e-12));
      const double se = aggregate_stderr(m.aggregation, values[m.name], iters);
      if (ref["stderr"].is_string()) CHECK(std::isnan(se));
      else CHECK(close_rel(se, ref["stderr"].get<double>(), 1e-9));  // bootstrap included: CPython's RNG stream
    }
  }
}

TEST_CASE("whole request lists hash to lm-eval's stored hashes exactly where the data are lm-eval's", "[harness]") {
  const json ref = read_json_file(kFixtures + "lm_eval_request_hashes.json")["tasks"];
  for (const auto& [name, h] : ref.items()) {
    auto task = make_harness_task(name);
    const bool same = task->data_files()[0]["matches_reference"].get<bool>();
    INFO(name << " vs lm-eval " << h["lm_eval_file"].get<std::string>());
    CHECK((lm_eval_request_hash(*task) == h["sha256"].get<std::string>()) == same);
  }
}

namespace {
// Sets $MNEMO_TASK_PATH for one test and restores it.
struct ScopedTaskPath {
  std::string old;
  bool had = false;
  explicit ScopedTaskPath(const std::string& value) {
    if (const char* v = std::getenv("MNEMO_TASK_PATH")) old = v, had = true;
    ::setenv("MNEMO_TASK_PATH", value.c_str(), 1);
  }
  ~ScopedTaskPath() { had ? ::setenv("MNEMO_TASK_PATH", old.c_str(), 1) : ::unsetenv("MNEMO_TASK_PATH"); }
};
}  // namespace

TEST_CASE("task specs: the built-ins are data files with their lm-eval source and commit", "[harness][task_specs]") {
  std::set<std::string> builtin;
  for (const TaskSpecFile& f : task_spec_files()) {
    CHECK(f.builtin);
    CHECK(f.path == "tasks/specs/" + f.spec["task"].get<std::string>() + ".json");
    CHECK(f.spec["reference"].get<std::string>().rfind("lm_eval/tasks/", 0) == 0);
    CHECK(f.spec["reference_commit"] == "4e7e0d4");
    builtin.insert(f.spec["task"].get<std::string>());
  }
  CHECK(builtin == std::set<std::string>{"arc_challenge", "arc_easy", "boolq", "commonsense_qa", "hellaswag",
                                         "openbookqa", "piqa", "social_iqa"});
}

TEST_CASE("task specs: a user adds a multiple-choice task by dropping a file into MNEMO_TASK_PATH",
          "[harness][task_specs]") {
  const fs::path dir = temp_dir("user_task");
  fs::create_directories(dir / "specs");
  fs::create_directories(dir / "data/eval");
  test::write_text_file(dir / "data/eval/colours.jsonl",
                        "{\"q\": \"The sky is\", \"options\": [\"blue\", \"green\"], \"answer\": 0}\n"
                        "{\"q\": \"Grass is\", \"options\": [\"blue\", \"green\"], \"answer\": 1}\n");
  test::write_text_file(dir / "specs/colours.json", R"({
  "task": "colours", "version": "1.0",
  "sources": [{"file": "eval/colours.jsonl", "format": "jsonl"}],
  "doc_to_text": "Q: {{q}}\nA:", "doc_to_choice": "options", "doc_to_target": "{{answer}}",
  "metrics": ["acc"]})");
  ScopedDataDir data(dir / "data");
  {
    ScopedTaskPath path((dir / "specs").string());
    const auto names = harness_task_names();
    CHECK(std::find(names.begin(), names.end(), "colours") != names.end());
    CHECK(expand_harness_tasks({"colours,piqa"}) == std::vector<std::string>{"colours", "piqa"});
    auto task = make_harness_task("colours");
    REQUIRE(task->num_docs() == 2);
    const auto reqs = task->requests(1);
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[0].arguments == json::array({"Q: Grass is\nA:", " blue"}));
    CHECK(reqs[1].arguments == json::array({"Q: Grass is\nA:", " green"}));
    CHECK(task->target(task->doc(1)) == "1");
  }
  CHECK_THROWS_WITH(make_harness_task("colours"), Catch::Contains("unknown task 'colours'"));  // path unset again

  // A malformed spec names the file and the field; a task defined twice names both files.
  test::write_text_file(dir / "specs/bad.json", R"({"task": "bad", "version": "1.0", "sources": [{"file": "x", "format": "csv"}],
    "doc_to_text": "{{q}}", "doc_to_choice": "options", "doc_to_target": "{{answer}}", "metrics": ["acc"]})");
  {
    ScopedTaskPath path((dir / "specs").string());
    CHECK_THROWS_WITH(harness_task_names(), Catch::Contains("bad.json: sources[0].format must be one of"));
  }
  fs::remove(dir / "specs/bad.json");
  test::write_text_file(dir / "specs/piqa2.json", R"({"task": "piqa", "version": "1.0", "sources": [{"file": "x", "format": "jsonl"}],
    "doc_to_text": "{{q}}", "doc_to_choice": "options", "doc_to_target": "{{answer}}", "metrics": ["acc"]})");
  {
    ScopedTaskPath path((dir / "specs").string());
    CHECK_THROWS_WITH(harness_task_names(), Catch::Contains("piqa2.json: task 'piqa' is already defined by tasks/specs/piqa.json"));
  }
  test::write_text_file(dir / "specs/piqa2.json", R"({"task": "piqa2", "version": "1.0", "colour": "red"})");
  {
    ScopedTaskPath path((dir / "specs").string());
    CHECK_THROWS_WITH(harness_task_names(), Catch::Contains("piqa2.json: colour is not a task spec field"));
  }
  {
    ScopedTaskPath path((dir / "nowhere").string());
    CHECK_THROWS_WITH(harness_task_names(), Catch::Contains("MNEMO_TASK_PATH: '") && Catch::Contains("nowhere' is not a folder"));
  }
  mnemo::test::remove_dir_tree(dir);
}
