// mnemo's own tasks in the one evaluation driver (engine/evaluation/harness_eval.h): token tasks (MQAR, MAD) as
// token_predictions requests, equal to the token evaluation the trainer runs (engine/evaluation/token_eval.h);
// generation tasks (S-NIAH, BABILong) as generate_until documents grouped in their settings' cells; both scored by
// the same process_results / aggregation path as the lm-eval tasks and reachable as `mnemo eval --tasks`.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/evaluation/token_eval.h"
#include "file_util.h"
#include "results/db.h"
#include "model_test_util.h"
#include "tasks/harness/aggregation.h"
#include "tasks/mad_tasks.h"
#include "tasks/token_evaluation.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

// A small untrained language model of `family` as a task's backbone.
Backbone small_backbone(const std::string& family, int64_t vocab) {
  const ModelConfig config = test::small_model(family, 32, vocab, 1)->config();
  torch::manual_seed(7);
  return make_backbone("language_model", config);
}

struct DriverRun {
  json results;                 // results.json's "results" entry of the task
  std::vector<EvalCell> cells;  // what the driver handed to `record`
  json out;
};

DriverRun run_token_task(Backbone& model, const std::shared_ptr<TokenTask>& task, int64_t n, uint64_t seed) {
  HarnessOptions o;
  o.tasks = {task->name()};
  o.make_task = [&](const std::string&) { return std::make_unique<TokenTaskEvaluation>(task, n, seed); };
  o.token_batch_size = 64;
  DriverRun r;
  o.record = [&](const std::vector<EvalCell>& cells) { r.cells = cells; };
  BackboneAdapter adapter(model, torch::kCPU);
  r.out = run_harness(&adapter, nullptr, o, {});
  r.results = r.out.at("results").at("results").at(task->name());
  return r;
}

const EvalCell& cell(const std::vector<EvalCell>& cells, const std::string& metric) {
  for (const auto& c : cells)
    if (c.metric == metric) return c;
  FAIL("no cell " << metric);
  return cells.front();
}

}  // namespace

TEST_CASE("MQAR through the evaluation driver: the trainer's accuracy and loss, the slice metrics, its parameters as "
          "the rows' setting", "[eval][mqar][harness]") {
  auto task = std::dynamic_pointer_cast<TokenTask>(TaskRegistry::instance().make(
      "mqar", {{"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2}, {"test_num_kv_pairs", {2, 4}}}));
  REQUIRE(task);
  Backbone model = small_backbone("gated_deltanet", 64);
  const auto examples = task->examples(Split::test, 150, 5);
  const TokenEvalResult reference = evaluate_tokens(model, examples, 64, torch::kCPU);
  const json slices = task->test_metrics(model.forward, examples, torch::kCPU);

  const DriverRun r = run_token_task(model, task, 150, 5);
  CHECK(r.results.at("accuracy,none").get<double>() == reference.accuracy);  // the same batches, the same sums
  CHECK(r.results.at("loss,none").get<double>() == Approx(reference.loss).epsilon(1e-6));
  CHECK(r.results.at("loss_stderr,none") == "N/A");
  CHECK(r.results.at("accuracy_nkv2,none").get<double>() == slices.at("accuracy_nkv2").get<double>());
  CHECK(r.results.at("accuracy_nkv4,none").get<double>() == slices.at("accuracy_nkv4").get<double>());
  REQUIRE(r.cells.size() == 4);  // accuracy, loss, accuracy_nkv2, accuracy_nkv4
  CHECK(cell(r.cells, "accuracy").setting == task->params());
  CHECK(cell(r.cells, "accuracy").n == reference.n_examples);
  CHECK(cell(r.cells, "loss").details.at("tokenizer").is_null());
  CHECK(r.out.at("files").empty());  // no output folder: the cells go to the database alone
  CHECK(r.out.at("results").at("configs").at("mqar").at("output_type") == "token_predictions");

  // The trainer's evaluation computes the slices from the same forward's predictions (no second pass).
  json from_predictions = task->test_metrics_of(examples, reference.predictions);
  CHECK(from_predictions == slices);
}

TEST_CASE("MAD through the evaluation driver: accuracy_macro is mad-lab's batched macro accuracy",
          "[eval][mad][harness]") {
  auto task = std::dynamic_pointer_cast<TokenTask>(TaskRegistry::instance().make(
      "mad_selective_copying", {{"vocab_size", 16}, {"seq_len", 64}, {"num_tokens_to_copy", 4}}));
  REQUIRE(task);
  Backbone model = small_backbone("transformer", 16);
  const auto examples = task->examples(Split::test, 300, 3);  // three of mad-lab's batches of 128 (the last short)
  const MadAccuracy reference = evaluate_mad_accuracy(model.forward, examples, 16, torch::kCPU);
  const DriverRun r = run_token_task(model, task, 300, 3);
  CHECK(r.results.at("accuracy_macro,none").get<double>() == reference.macro_batched);
  CHECK(r.results.at("accuracy,none").get<double>() == Approx(reference.example_mean).epsilon(1e-12));
}

TEST_CASE("weighted_mean aggregates [sum, count] pairs without a stderr, and the fourth request type has its name",
          "[eval][harness]") {
  CHECK(harness::aggregate("weighted_mean", {json::array({3.0, 2}), json::array({1.0, 2})}) == Approx(1.0));
  CHECK(std::isnan(harness::aggregate_stderr("weighted_mean", {json::array({3.0, 2}), json::array({1.0, 2})})));
  CHECK(harness::request_type_name(harness::RequestType::token_predictions) == "token_predictions");
}

TEST_CASE("`mnemo eval --tasks mqar`: the token task beside the lm-eval ones, with results.json, samples and the "
          "rows `--task` writes", "[eval][mqar][cli]") {
  test::TempDir dir("token_eval");
  const fs::path run = dir.path / "mqar";
  {
    auto r = test::run_mnemo(
        "train --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set num_kv_pairs=2"
        " --set d_model=16 --set n_layers=1 --set n_heads=2 --set batch_size=8 --set n_train=64 --set n_test=16"
        " --set steps=2 --set eval_every=2 --quiet --db " + dir.file("train.sqlite") + " --out " + run.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  // `--task` (the checkpoint's own task, 1000 test examples at the run's seed) and `--tasks mqar` score the same.
  auto single = test::run_mnemo("eval --checkpoint " + run.string() + " --db " + dir.file("a.sqlite"));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  CHECK_THAT(single.output, Catch::Contains("[mqar] 1000 documents, 1000 token_predictions requests, batch 64"));
  const std::string last_line = single.output.substr(single.output.rfind('{', single.output.find("\"metrics\"")));
  const json metrics = json::parse(last_line).at("metrics");
  CHECK(metrics.at("n") == 1000);
  const fs::path out = dir.path / "eval";
  auto suite = test::run_mnemo("eval --checkpoint " + run.string() + " --tasks mqar --log-samples --output-path " +
                               out.string() + " --db " + dir.file("b.sqlite"));
  INFO(suite.output);
  REQUIRE(suite.exit_code == 0);
  CHECK_THAT(suite.output, Catch::Contains("|mqar "));
  json results;
  std::ifstream(out / "results.json") >> results;
  CHECK(results.at("results").at("mqar").at("accuracy,none").get<double>() == metrics.at("accuracy").get<double>());
  CHECK(results.at("results").at("mqar").at("loss,none").get<double>() == Approx(metrics.at("loss").get<double>()));
  CHECK(results.at("n-samples").at("mqar").at("effective") == 1000);
  CHECK(results.at("config").at("tokenizer").is_null());
  const auto samples = test::read_jsonl(out / "samples_mqar.jsonl");
  REQUIRE(samples.size() == 1000);
  CHECK(samples[0].at("arguments").at("gen_args_0").at("arg_0").size() == 32);  // the input ids
  CHECK(samples[0].at("resps")[0][0].at("predictions").size() == 32);
  // The samples re-scored without the model: the documents drawn again from the run, every value recomputed, the
  // task's metrics (the slice accuracies included) equal to results.json's.
  auto rescored = test::run_mnemo("score --task mqar --samples " + (out / "samples_mqar.jsonl").string() +
                                  " --checkpoint " + run.string());
  INFO(rescored.output);
  REQUIRE(rescored.exit_code == 0);
  const json again = json::parse(rescored.output.substr(rescored.output.rfind("{\"checked\"")));
  CHECK(again.at("n") == 1000);
  for (auto it = results.at("results").at("mqar").begin(); it != results.at("results").at("mqar").end(); ++it)
    if (it.value().is_number()) {
      CAPTURE(it.key());
      CHECK(again.at("results").at(it.key()).get<double>() == Approx(it.value().get<double>()).epsilon(1e-12));
    }
  auto no_run = test::run_mnemo("score --task mqar --samples " + (out / "samples_mqar.jsonl").string());
  CHECK(no_run.exit_code != 0);
  CHECK_THAT(no_run.output, Catch::Contains("give --checkpoint RUN"));
  auto other_run = test::run_mnemo("score --task mad_in_context_recall --samples " +
                                   (out / "samples_mqar.jsonl").string() + " --checkpoint " + run.string());
  CHECK(other_run.exit_code != 0);
  CHECK_THAT(other_run.output, Catch::Contains("mnemo: error:"));

  // Requests without a model; refusals name what is wrong.
  auto requests = test::run_mnemo("eval --tasks mqar --requests-only --limit 3 --output-path " +
                                  (dir.path / "requests").string());
  INFO(requests.output);
  REQUIRE(requests.exit_code == 0);
  CHECK(test::read_jsonl(dir.path / "requests" / "mqar.jsonl").size() == 3);
  auto tokenizer = test::run_mnemo("eval --checkpoint " + run.string() + " --tasks mqar --tokenizer byte --db " +
                                   dir.file("c.sqlite"));
  CHECK(tokenizer.exit_code != 0);
  CHECK_THAT(tokenizer.output, Catch::Contains("mnemo: error: eval: --tokenizer byte is not used"));
  auto mixed = test::run_mnemo("eval --checkpoint " + run.string() + " --tasks mqar,piqa --db " + dir.file("c.sqlite"));
  CHECK(mixed.exit_code != 0);
  CHECK_THAT(mixed.output, Catch::Contains("names no tokenizer"));
  CHECK(!fs::exists(dir.file("c.sqlite")));
}

TEST_CASE("`mnemo eval --tasks sniah_1`: a generation task in the suite scores what `--task sniah_1` scores",
          "[eval][sniah][cli]") {
  test::TempDir dir("generation_eval");
  const fs::path run = dir.path / "run";
  {
    auto r = test::run_mnemo("train --model transformer --task sniah_1 --set length=520 --set tokens_to_generate=8 "
                             "--set d_model=16 --set n_heads=2 --set steps=2 --set eval_every=2 --set n_test=2 "
                             "--set n_train=4 --set batch_size=2 --quiet --db " + dir.file("train.sqlite") + " --out " +
                             run.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  auto single = test::run_mnemo("eval --checkpoint " + run.string() + " --task sniah_1 --n 2 --db " + dir.file("a.sqlite"));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  const json one = json::parse(single.output.substr(single.output.rfind("{\"cells\"")));
  REQUIRE(one.at("cells").size() == 1);  // the checkpoint's length, RULER's depth rule: one cell
  const std::string metric = one.at("metric");
  const fs::path out = dir.path / "eval";
  auto suite = test::run_mnemo("eval --checkpoint " + run.string() + " --tasks sniah_1 --limit 2 --log-samples " +
                               "--output-path " + out.string() + " --db " + dir.file("b.sqlite"));
  INFO(suite.output);
  REQUIRE(suite.exit_code == 0);
  json results;
  std::ifstream(out / "results.json") >> results;
  CHECK(results.at("results").at("sniah_1").at(metric + ",none").get<double>() ==
        one.at("cells")[0].at("value").get<double>());
  CHECK(test::read_jsonl(out / "samples_sniah_1.jsonl").size() == 2);
  // The rows are the cells `--task` records: the cell's setting, the plan's details with the samples.
  ResultsDB db(dir.file("b.sqlite"));
  const auto rows = db.evals("sniah_1");
  REQUIRE(rows.size() == 1);
  json setting = one.at("cells")[0];
  setting.erase("value");
  setting.erase("n");
  CHECK(json::parse(rows[0].setting_json) == setting);
  CHECK(json::parse(rows[0].details_json).at("samples").size() == 2);
  auto requests = test::run_mnemo("eval --tasks sniah_1 --requests-only --output-path " + (dir.path / "r").string());
  CHECK(requests.exit_code != 0);
  CHECK_THAT(requests.output, Catch::Contains("mnemo: error: eval: task sniah_1 sizes its prompts"));
}

TEST_CASE("every registered task says how `mnemo eval --tasks` scores it (TaskFamily::evaluation)", "[eval][registry]") {
  auto& registry = TaskRegistry::instance();
  for (const auto& name : registry.names()) {
    DYNAMIC_SECTION(name) {
      const auto task = registry.make(name, json::object());
      const bool generation = dynamic_cast<const GenerationTask*>(task.get()) != nullptr;
      const bool token = !generation && dynamic_cast<const TokenTask*>(task.get()) != nullptr;
      const bool logprobs = !generation && dynamic_cast<const EvalTask*>(task.get()) != nullptr;  // lm_ppl
      CHECK(registry.at(name).evaluation ==
            (generation ? "generate_until" : token ? "token_predictions" : logprobs ? "token_logprobs" : ""));
    }
  }
}
