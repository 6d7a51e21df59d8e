// `mnemo score --samples` (engine/evaluation/score.h score_samples): a samples file of the lm-eval driver re-scored without the
// model gives results.json's numbers; a file of another task, a malformed line, a missing resps, a wrong number of
// responses, a changed stored metric are errors naming file:line and the field. `--skip-malformed`: malformed
// records of a (corrupted) data file are skipped, counted and listed, doc_ids keep their gaps.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/evaluation/score.h"
#include "file_util.h"
#include "runtime/model.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/tokenizer.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

LanguageModel tiny_model() {
  torch::manual_seed(0);
  LanguageModel m(model_config_from_json({{"model", "transformer"}, {"vocab_size", 258}, {"d_model", 32},
                                          {"n_layers", 2}, {"n_heads", 4}}));
  m->eval();
  return m;
}

void write_jsonl(const fs::path& p, const std::vector<json>& lines) {
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  test::write_text_file(p, text);
}

// The lines of a text file, '\n'-separated, without the last empty one.
std::vector<std::string> text_lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

// One evaluation of piqa, winogrande and wikitext (the first 3 documents) with --log-samples, shared by the tests.
struct Evaluated {
  test::TempDir dir{"harness_score"};
  json out;
  Evaluated() {
    auto model = tiny_model();
    LanguageModelAdapter adapter(*model, torch::kCPU);
    ByteTokenizer tok;
    HarnessOptions o;
    o.tasks = {"piqa", "winogrande", "wikitext"};
    o.limit = 3;
    o.batch_size = 16;
    o.max_length = 256;
    o.log_samples = true;
    o.output_path = dir.file("out");
    out = run_harness(&adapter, tok, o, {});
  }
  std::string samples(const std::string& task) const { return dir.file("out/samples_" + task + ".jsonl"); }
};

const Evaluated& evaluated() {
  static const Evaluated e;
  return e;
}

}  // namespace

TEST_CASE("score --samples re-scores eval's samples files to results.json's numbers", "[harness][score]") {
  const Evaluated& e = evaluated();
  const json& results = e.out.at("results").at("results");
  for (const std::string task : {"piqa", "winogrande", "wikitext"}) {
    INFO(task);
    const json scored = score_samples(task, e.samples(task));
    CHECK(scored.at("task") == task);
    CHECK(scored.at("n") == 3);
    CHECK(scored.at("results") == results.at(task));  // values and stderrs, bit for bit
    CHECK(scored.at("checked").get<std::string>().find("equal the stored values") != std::string::npos);
    // The same through the CLI, without a model.
    const auto r = test::run_mnemo("score --task " + task + " --samples " + e.samples(task));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.output).at("results") == results.at(task));
  }
  CHECK(results.at("wikitext").at("word_perplexity_stderr,none") == "N/A");  // weighted_perplexity: none, as lm-eval
}

TEST_CASE("score --samples: another task's file, malformed lines, missing or miscounted resps, changed metrics",
          "[harness][score]") {
  const Evaluated& e = evaluated();
  const std::string piqa = e.samples("piqa");
  const auto lines = test::read_jsonl(piqa);
  REQUIRE(lines.size() == 3);
  test::TempDir dir("harness_score_bad");
  const std::string bad = dir.file("bad.jsonl");
  auto expect_error = [&](const std::vector<json>& content, const std::string& where, const std::string& field) {
    write_jsonl(bad, content);
    CHECK_THROWS_WITH(score_samples("piqa", bad), Catch::Contains(bad + ":" + where + ":") && Catch::Contains(field));
  };
  // A samples file of another task: its first line's doc is not that task's document.
  CHECK_THROWS_WITH(score_samples("winogrande", piqa), Catch::Contains(piqa + ":1:") && Catch::Contains("field 'doc'") &&
                                                           Catch::Contains("another task"));
  CHECK_THROWS_WITH(score_samples("arc_easy", e.samples("winogrande")), Catch::Contains(":1:") && Catch::Contains("'doc'"));
  // A malformed line.
  test::write_text_file(bad, lines[0].dump() + "\n{\"doc_id\": 1, \"doc\": \n");
  CHECK_THROWS_WITH(score_samples("piqa", bad), Catch::Contains(bad + ":2:") && Catch::Contains("not valid JSON"));
  // Missing resps; a wrong number of responses; a response of the wrong shape.
  json l = lines[1];
  l.erase("resps");
  expect_error({lines[0], l}, "2", "field 'resps' missing");
  l = lines[0];
  l["resps"].erase(1);
  expect_error({l}, "1", "field 'resps' holds 1 responses; the task builds 2 requests");
  l = lines[0];
  l["resps"][0][0] = "-1.5";
  expect_error({l}, "1", "field 'resps' [0]");
  // Arguments that differ from the task's requests (other prompts), a doc_id outside the task, a repeated one.
  l = lines[2];
  l["arguments"]["gen_args_1"]["arg_0"] = "Question: something else\nAnswer:";
  expect_error({l}, "1", "field 'arguments'");
  l = lines[0];
  l["doc_id"] = 100000;
  expect_error({l}, "1", "field 'doc_id' = 100000 is outside");
  l = lines[0];
  l.erase("doc_id");
  expect_error({l}, "1", "field 'doc_id' missing");
  expect_error({lines[0], lines[0]}, "2", "repeats line 1");
  // A stored metric that the responses do not give.
  l = lines[1];
  l["acc"] = 1.0 - l["acc"].get<double>();
  expect_error({lines[0], l}, "2", "field 'acc'");
  // An empty file; --predictions for an lm-eval task points to --samples.
  test::write_text_file(bad, "\n");
  CHECK_THROWS_WITH(score_samples("piqa", bad), Catch::Contains("holds no samples"));
  CHECK_THROWS_WITH(score_predictions("piqa", bad, "strict"), Catch::Contains("--samples"));
  // The CLI: one error line, exit status 1.
  write_jsonl(bad, {lines[0], l});
  auto r = test::run_mnemo("score --task piqa --samples " + bad);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("mnemo: error: " + bad + ":2: field 'acc'", 0) == 0);
  r = test::run_mnemo("score --task piqa --samples " + bad + " --predictions " + bad);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("one of them") != std::string::npos);
}

TEST_CASE("eval with skip_malformed: malformed records are skipped, counted and listed, doc_ids keep their gaps",
          "[harness][score][cli]") {
  test::TempDir data("malformed_data");
  // A corrupted copy of PIQA: record 3 lost its "goal", record 5 is cut off.
  auto piqa_lines = text_lines(read_text_file(data_path("eval/piqa/valid.jsonl")));
  REQUIRE(piqa_lines.size() > 6);
  json third = json::parse(piqa_lines[2]);
  third.erase("goal");
  piqa_lines[2] = third.dump();
  piqa_lines[4] = piqa_lines[4].substr(0, 20);
  std::string text;
  for (const auto& line : piqa_lines) text += line + "\n";
  test::write_text_file(data.path / "eval/piqa/valid.jsonl", text);
  test::write_text_file(data.path / "eval/piqa/valid-labels.lst", read_text_file(data_path("eval/piqa/valid-labels.lst")));
  test::ScopedDataDir scoped(data.path);

  // Without the flag the modified file is refused (its SHA-256), and the message names the flag.
  CHECK_THROWS_WITH(harness::make_harness_task("piqa")->num_docs(),
                    Catch::Contains("SHA-256") && Catch::Contains("--skip-malformed"));

  auto model = tiny_model();
  LanguageModelAdapter adapter(*model, torch::kCPU);
  ByteTokenizer tok;
  test::TempDir out_dir("malformed_out");
  HarnessOptions o;
  o.tasks = {"piqa"};
  o.limit = 6;
  o.skip_malformed = true;
  o.log_samples = true;
  o.output_path = out_dir.file("eval");
  std::vector<EvalCell> cells;
  o.record = [&](const std::vector<EvalCell>& c) { cells.insert(cells.end(), c.begin(), c.end()); };
  std::vector<std::string> log;
  const json out = run_harness(&adapter, tok, o, [&](const std::string& l) { log.push_back(l); });
  const json& res = out.at("results");
  CHECK(res.at("n-samples").at("piqa") == json({{"original", 1838}, {"effective", 6}, {"skipped", 0}, {"malformed", 2}}));
  REQUIRE(res.at("malformed_records").at("piqa").size() == 2);
  CHECK(res.at("malformed_records").at("piqa")[0] ==
        json({{"doc_id", 2}, {"where", "eval/piqa/valid.jsonl:3"}, {"reason", "field 'goal' missing"}}));
  CHECK(res.at("malformed_records").at("piqa")[1].at("where") == "eval/piqa/valid.jsonl:5");
  CHECK(res.at("malformed_records").at("piqa")[1].at("reason").get<std::string>().rfind("malformed JSON record", 0) == 0);
  CHECK(res.at("config").at("skip_malformed") == true);
  CHECK(res.at("data_files").at("piqa")[0].at("matches_reference") == false);
  CHECK(res.at("data_files").at("piqa")[0].at("modified") == true);
  CHECK(out.at("malformed").at("piqa").at("skipped") == 2);
  CHECK(out.at("data_warnings").at("piqa").size() == 1);
  REQUIRE(cells.size() == 2);  // acc, acc_norm
  CHECK(cells[0].n == 4);
  CHECK(cells[0].details.at("malformed_skipped") == 2);
  CHECK(cells[0].details.at("malformed_records").size() == 2);
  bool logged = false;
  for (const auto& l : log) logged = logged || l.find("eval/piqa/valid.jsonl:3 (field 'goal' missing)") != std::string::npos;
  CHECK(logged);
  // The samples keep the records' indices (gaps at 2 and 4) and score back with the same flag.
  const auto samples = test::read_jsonl(out_dir.path / "eval" / "samples_piqa.jsonl");
  std::vector<int64_t> ids;
  for (const auto& s : samples) ids.push_back(s.at("doc_id").get<int64_t>());
  CHECK(ids == std::vector<int64_t>{0, 1, 3, 5});
  const std::string samples_path = out_dir.file("eval/samples_piqa.jsonl");
  SamplesScoreOptions skip;
  skip.skip_malformed = true;
  CHECK(score_samples("piqa", samples_path, skip).at("results") == res.at("results").at("piqa"));
  CHECK_THROWS_WITH(score_samples("piqa", samples_path), Catch::Contains("--skip-malformed"));

  // Requests only: the same gaps.
  HarnessOptions q = o;
  q.requests_only = true;
  q.output_path = out_dir.file("requests");
  const json rq = run_harness(nullptr, tok, q, {});
  ids.clear();
  for (const auto& s : test::read_jsonl(out_dir.path / "requests" / "piqa.jsonl")) ids.push_back(s.at("doc_id").get<int64_t>());
  CHECK(ids == std::vector<int64_t>{0, 1, 3, 5});
  CHECK(rq.at("malformed").at("piqa").at("skipped") == 2);

  // The CLI prints them under the output; without the flag the first problem is the error.
  const std::string args = "--data-dir " + data.path.string() + " --output-path " + out_dir.file("cli");
  auto r = test::run_mnemo("eval --tasks piqa --requests-only --limit 6 --skip-malformed " + args);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("piqa: 2 malformed records skipped: eval/piqa/valid.jsonl:3 (field 'goal' missing), "
                      "eval/piqa/valid.jsonl:5 (malformed JSON record") != std::string::npos);
  CHECK(r.output.find("piqa: data file eval/piqa/valid.jsonl: SHA-256") != std::string::npos);
  r = test::run_mnemo("eval --tasks piqa --requests-only --limit 6 " + args);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("mnemo: error: task piqa: data file") != std::string::npos);
  r = test::run_mnemo("eval --checkpoint x --task sniah_1 --skip-malformed");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--skip-malformed goes with --tasks") != std::string::npos);
}

TEST_CASE("skip_malformed on a file without a checksum: the first malformed record is the error without it",
          "[harness][score]") {
  test::TempDir data("malformed_recall");
  test::ScopedDataDir scoped(data.path);
  const std::string good = "{\"text\": \"t\", \"key\": \"k\", \"value\": \"v\"}\n";
  test::write_text_file(data.path / "eval/recall/fda.jsonl",
                        good + "{\"text\": \"t\", \"value\": \"v\"}\n" + good + "[1, 2]\n" + good);
  CHECK_THROWS_WITH(harness::make_harness_task("fda")->num_docs(),
                    Catch::Contains("eval/recall/fda.jsonl:2") && Catch::Contains("field 'key' missing"));
  auto task = harness::make_harness_task("fda");
  harness::HarnessTaskContext ctx;
  ctx.skip_malformed = true;
  task->configure(ctx);
  CHECK(task->num_docs() == 5);
  const auto malformed = task->malformed_records();
  REQUIRE(malformed.size() == 2);
  CHECK(malformed[0].doc_id == 1);
  CHECK(malformed[0].reason == "field 'key' missing");
  CHECK(malformed[1].doc_id == 3);
  CHECK(malformed[1].where == "eval/recall/fda.jsonl:4");
  CHECK(malformed[1].reason == "expected a JSON object, got array");
  CHECK(task->requests(2).size() == 1);
  CHECK(task->requests(4).at(0).doc_id == 4);
  CHECK_THROWS_WITH(task->requests(1), Catch::Contains("malformed record") && Catch::Contains("fda.jsonl:2"));
  CHECK_THROWS_WITH(task->doc(3), Catch::Contains("fda.jsonl:4"));
}

TEST_CASE("score --samples of recall tasks: generations and loglikelihoods, --cutting-context as the evaluation ran it",
          "[harness][score][recall]") {
  test::TempDir data("score_recall");
  const std::string inputs = std::string(MNEMO_SOURCE_DIR) + "/tests/data/harness/recall/inputs/";
  for (const char* f : {"fda.jsonl", "squad_completion.jsonl"})
    test::write_text_file(data.path / "eval/recall" / f, read_text_file(inputs + f));
  test::ScopedDataDir scoped(data.path);
  auto model = tiny_model();
  LanguageModelAdapter adapter(*model, torch::kCPU);
  ByteTokenizer tok;
  HarnessOptions o;
  o.tasks = {"fda", "squad_completion"};  // squad: a generate_until and a loglikelihood per document
  o.limit = 6;
  o.max_length = 256;
  o.log_samples = true;
  o.cutting_context = true;
  o.context_length = 64;
  o.answer_length = 16;
  o.output_path = data.file("out");
  const json out = run_harness(&adapter, tok, o, {});
  SamplesScoreOptions cut;
  cut.cutting_context = true;
  cut.context_length = 64;
  cut.answer_length = 16;
  for (const std::string task : {"fda", "squad_completion"}) {
    INFO(task);
    const std::string samples = data.file("out/samples_" + task + ".jsonl");
    CHECK(score_samples(task, samples, cut).at("results") == out.at("results").at("results").at(task));
    // Without the cut the documents differ: the first line says so and names the flags.
    CHECK_THROWS_WITH(score_samples(task, samples),
                      Catch::Contains(samples + ":1: field 'doc'") && Catch::Contains("--cutting-context"));
  }
  CHECK(out.at("skipped").at("fda") == 3);  // records 3, 4, 5: answer strings too short to cut around
}
