// Failure modes of evaluation and writing: a model with non-finite weights is refused on every evaluation path (and
// the fused CPU kernels propagate NaN as the eager formulas do); a failed write (a full disk, a file size limit,
// injected with MNEMO_FAIL_WRITE_AFTER_BYTES or `ulimit -f`) ends in one error line with nothing truncated under a
// final name and the run resumable; SIGTERM stops `eval --tasks` with nothing written; a request longer than the
// default max_length; failed evaluations leave no empty database or folder; the messages of `eval`'s option checks.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/http.h"
#include "runtime/backbone.h"
#include "engine/io/checkpoint.h"
#include "engine/tools/bench.h"
#include "engine/io/data_fetch.h"
#include "results/db.h"
#include "runtime/attention/attention.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/gelu.h"
#include "runtime/layers.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "tests/file_util.h"
#include "tests/http_test_server.h"
#include "tests/model_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

// Runs `mnemo <args>` under a shell prefix (environment variables, `ulimit`), stdout + stderr together.
test::CommandResult run_with(const std::string& prefix, const std::string& args) {
  const std::string cmd = prefix + " " + std::string(MNEMO_BINARY) + " " + args + " 2>&1";
  return test::run_shell(cmd);
}

// `mnemo <args>` with its writes limited: bash, SIGXFSZ ignored (so that write(2) fails with EFBIG, as on a full
// disk), `ulimit -f kib`.
test::CommandResult run_file_limited(int64_t kib, const std::string& args) {
  const std::string cmd = "bash -c 'trap \"\" XFSZ; ulimit -f " + std::to_string(kib) + "; exec " +
                          std::string(MNEMO_BINARY) + " " + args + "' 2>&1";
  return test::run_shell(cmd);
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// One failure, said once: a single "mnemo: error:" line, no LibTorch backtrace, no abort.
void check_one_error_line(const test::CommandResult& r) {
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 134);
  CHECK(count_of(r.output, "mnemo: error:") == 1);
  CHECK(r.output.find("terminate called") == std::string::npos);
  CHECK(r.output.find("Exception raised from") == std::string::npos);
}

// No file under `dir` is a temporary left behind (NAME.tmp.<pid>).
void check_no_temporaries(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    INFO(e.path());
    CHECK(!std::regex_search(e.path().filename().string(), std::regex(R"(\.tmp\.[0-9]+$)")));
  }
}

// A small byte-level language model: the corpus (a few short documents) and the run config; seq_len 64, d_model 16.
fs::path write_lm_config(const fs::path& dir, int64_t steps = 2) {
  const fs::path corpus = dir / "corpus";
  fs::create_directories(corpus);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it", "was"};
  uint64_t x = 12345;
  for (int d = 0; d < 6; ++d) {
    std::ofstream f(corpus / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < 80; ++w) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      f << words[(x >> 33) % 12] << (w % 9 == 8 ? ".\n" : " ");
    }
  }
  const json cfg = {{"model", "transformer"}, {"task", "lm"},     {"corpus", corpus.string()}, {"val_every", 2},
                    {"seq_len", 64},          {"d_model", 16},    {"n_layers", 1},             {"n_heads", 2},
                    {"batch_size", 2},        {"steps", steps},   {"eval_every", 2},           {"log_every", 1},
                    {"warmup_frac", 0.0},     {"val_tokens", 128}, {"seed", 1},
                    {"cache_dir", (dir / "cache").string()},      {"device", "cpu"}};
  test::write_text_file(dir / "lm.json", cfg.dump());
  return dir / "lm.json";
}

// Trains the small language model into dir/lm (one step at a time is enough for an evaluation).
fs::path train_lm(const fs::path& dir) {
  const fs::path cfg = write_lm_config(dir);
  auto r = test::run_mnemo("train --config " + cfg.string() + " --db " + (dir / "train.sqlite").string() + " --out " +
                           (dir / "lm").string() + " --quiet");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir / "lm";
}

// A copy of the checkpoint in `from` with weight[0, 0] of the first parameter named like `name` set to `value`.
fs::path poisoned_copy(const fs::path& from, const fs::path& to, const std::string& name, double value) {
  Backbone b = load_backbone(from.string(), torch::kCPU);
  bool done = false;
  for (auto& p : b.module->named_parameters()) {
    if (p.key().find(name) == std::string::npos) continue;
    torch::NoGradGuard no_grad;
    p.value().view({-1})[0].fill_(value);
    done = true;
    break;
  }
  REQUIRE(done);
  save_checkpoint(to.string(), load_checkpoint_config(from.string()), b, nullptr, TrainerState{});
  return to;
}

// fused and eager agree where the inputs are not finite: NaN exactly where the eager formula has NaN, the same
// infinities, the finite values within tol. And some NaN got through (the case tests something).
void check_same_nonfinite(const torch::Tensor& fused, const torch::Tensor& eager, double tol) {
  REQUIRE(fused.sizes() == eager.sizes());
  CHECK(torch::equal(fused.isnan(), eager.isnan()));
  CHECK(torch::equal(fused.isposinf(), eager.isposinf()));
  CHECK(torch::equal(fused.isneginf(), eager.isneginf()));
  CHECK(eager.isnan().any().item<bool>());
  const auto finite = torch::isfinite(eager).logical_and(torch::isfinite(fused));
  if (finite.any().item<bool>())
    CHECK(test::max_rel_err(fused.masked_select(finite), eager.masked_select(finite), 1e-3) <= tol);
}

}  // namespace

namespace graph_lifetime {

// Every autograd node reachable from `root` but the parameters' AccumulateGrad nodes (their parameters own them).
std::vector<std::weak_ptr<torch::autograd::Node>> graph_nodes(const std::shared_ptr<torch::autograd::Node>& root) {
  std::vector<std::weak_ptr<torch::autograd::Node>> nodes;
  std::set<const torch::autograd::Node*> seen;
  std::vector<std::shared_ptr<torch::autograd::Node>> todo = {root};
  while (!todo.empty()) {
    auto node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    if (node->name().find("AccumulateGrad") == std::string::npos) nodes.push_back(node);
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function);
  }
  return nodes;
}

}  // namespace graph_lifetime

TEST_CASE("every family's training graph is freed by the next step (no reference cycle keeps a node alive)",
          "[reliability][graph]") {
  // A node that keeps, in its saved state, a tensor whose history leads back to the node itself is never freed, and
  // neither is the graph below it: each training step then leaks its activations (a MesaNet LM cell grew to 24 GB
  // this way). A model may hold its last forward's auxiliary loss (MoM's load balance) until the next forward, so
  // the check is: once the next step has run, no node of the first step is alive.
  for (const std::string& family : Registry::instance().model_names()) {
    CAPTURE(family);
    LanguageModel model = test::small_model(family, 64, 64, 3);
    model->train();
    const torch::Tensor tokens = torch::randint(0, 64, {2, 40}, torch::kLong);
    auto step = [&] {  // one forward + backward; the nodes of its graph
      torch::Tensor logits = model->forward(tokens);
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 64}), tokens.reshape({-1}));
      torch::Tensor aux = model->aux_loss();
      if (aux.defined()) loss = loss + aux;
      auto nodes = graph_lifetime::graph_nodes(loss.grad_fn());
      loss.backward();
      model->zero_grad(true);
      return nodes;
    };
    const auto first = step();
    REQUIRE(first.size() > 10);
    step();
    for (const auto& weak : first) {
      const auto alive = weak.lock();
      if (alive) FAIL_CHECK("node " << alive->name() << " of the first step outlives the second");
    }
  }
}

TEST_CASE("fused CPU kernels propagate NaN and infinities as the eager formulas do", "[reliability][fused]") {
  torch::manual_seed(11);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 2e-5;
    torch::NoGradGuard no_grad;
    DYNAMIC_SECTION(c10::toString(dtype) << " attention: NaN or inf in q or k") {
      for (const auto& [where, value] : std::vector<std::pair<std::string, double>>{
               {"q", nan}, {"k", nan}, {"q", inf}, {"k", -inf}}) {
        INFO(where << " holds " << value);
        auto q = torch::randn({1, 2, 70, 8}, dtype), k = torch::randn({1, 2, 70, 8}, dtype),
             v = torch::randn({1, 2, 70, 8}, dtype);
        (where == "q" ? q : k).index_put_({0, 1, 20, 3}, value);  // head 1, position 20
        REQUIRE(fused_cpu_enabled());
        const auto fused = blocked_attention(q, k, v, 0, 0, 0, 16);
        const auto eager = blocked_attention_eager(q, k, v, 0, 0, 0, 16);
        check_same_nonfinite(fused, eager, tol);
        check_same_nonfinite(fused, naive_attention(q, k, v, 0, 0, 0), tol);
      }
    }
    DYNAMIC_SECTION(c10::toString(dtype) << " SwiGLU gate, RMSNorm, GELU") {
      auto gu = torch::randn({3, 10}, dtype);
      gu.index_put_({0, 1}, nan), gu.index_put_({1, 2}, inf), gu.index_put_({2, 3}, -inf);  // in the gate half
      gu.index_put_({2, 7}, nan);                                                             // in the up half
      auto parts = gu.chunk(2, -1);
      check_same_nonfinite(fused_swiglu_gate(gu), torch::silu(parts[0]) * parts[1], tol);

      auto x = torch::randn({4, 6}, dtype), w = torch::randn({6}, dtype);
      x.index_put_({1, 2}, nan), x.index_put_({3, 0}, inf);
      check_same_nonfinite(rms_norm(x, w), rms_norm_reference(x, w), tol);

      auto h = torch::randn({2, 5}, dtype);
      h.index_put_({0, 1}, nan);
      check_same_nonfinite(gelu_values(h).value, torch::gelu(h), dtype == torch::kFloat64 ? 1e-14 : 3e-6);
    }
  }
}

TEST_CASE("a checkpoint with one NaN or inf weight is refused on every evaluation path, nothing recorded",
          "[reliability][nonfinite][cli]") {
  test::TempDir dir("nonfinite");
  const fs::path lm = train_lm(dir.path);
  const fs::path mqar = dir.path / "mqar";
  {
    auto r = test::run_mnemo(
        "train --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set num_kv_pairs=2"
        " --set d_model=16 --set n_layers=1 --set n_heads=2 --set batch_size=8 --set n_train=64 --set n_test=16"
        " --set steps=2 --set eval_every=2 --quiet --db " + (dir.path / "train.sqlite").string() + " --out " +
        mqar.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto& [label, value] : std::vector<std::pair<std::string, double>>{{"nan", nan}, {"inf", inf}}) {
    const fs::path bad_lm = poisoned_copy(lm, dir.path / ("lm_" + label), "q_proj", value);
    const fs::path bad_mqar = poisoned_copy(mqar, dir.path / ("mqar_" + label), "q_proj", value);
    const std::string db = (dir.path / (label + ".sqlite")).string(), out = (dir.path / ("out_" + label)).string();
    // eval --tasks (loglikelihoods), with the fused CPU attention and with the eager one.
    for (const std::string fused : {"1", "0"}) {
      auto r = run_with("MNEMO_THREADS=1 MNEMO_FUSED_CPU=" + fused,
                        "eval --checkpoint " + bad_lm.string() + " --tasks piqa,arc_easy --limit 2 --max-length 512 " +
                            "--log-samples --db " + db + " --output-path " + out);
      INFO(label << ", MNEMO_FUSED_CPU=" << fused << ": " << r.output);
      check_one_error_line(r);
      CHECK(std::regex_search(r.output, std::regex(R"(mnemo: error: task piqa, document [01]: the model's )"
                                                   R"(log-likelihood is (-?nan|-?inf) \(non-finite weights)")));
      CHECK(!fs::exists(db));
      CHECK(!fs::exists(out));
    }
    {  // a token task's eval
      auto r = run_with("MNEMO_THREADS=1", "eval --checkpoint " + bad_mqar.string() + " --db " + db);
      INFO(label << ": mqar");
      check_one_error_line(r);
      CHECK_THAT(r.output, Catch::Contains("task mqar, test example 0: the model's logits are not finite"));
      CHECK(!fs::exists(db));
    }
    {  // a generation task (greedy decoding)
      auto r = run_with("MNEMO_THREADS=1", "eval --checkpoint " + bad_lm.string() +
                                               " --task sniah_1 --lengths 640 --depths 50 --n 1 --db " + db);
      INFO(label << ": sniah_1");
      check_one_error_line(r);
      CHECK_THAT(r.output, Catch::Contains("task sniah_1"));
      CHECK_THAT(r.output, Catch::Contains("document 0: the model's logits for generated token 1 are not finite"));
      CHECK(!fs::exists(db));
    }
  }
  // The same checkpoint before the damage evaluates (the refusals above are the weights', not the setup's).
  auto ok = run_with("MNEMO_THREADS=1", "eval --checkpoint " + lm.string() + " --tasks piqa --limit 2 --max-length 512 --db " +
                                            (dir.path / "ok.sqlite").string() + " --output-path " +
                                            (dir.path / "ok").string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(fs::exists(dir.path / "ok" / "results.json"));
}

namespace {

const char* kMqarTrain =
    " --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set num_kv_pairs=2 --set d_model=16"
    " --set n_layers=1 --set n_heads=2 --set batch_size=8 --set n_train=64 --set n_test=16 --set steps=6"
    " --set eval_every=3 --quiet";

// Every file under `dir` whose name is final (no temporary) is whole: checkpoint folders load, JSON parses.
void check_nothing_truncated(const fs::path& dir) {
  check_no_temporaries(dir);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    INFO(e.path());
    if (e.path().extension() == ".json") CHECK_NOTHROW(read_json_file(e.path().string()));
  }
  for (const char* name : {"checkpoint", "checkpoint.tmp", "checkpoint.old"}) {
    const fs::path ckpt = dir / name;
    if (fs::exists(ckpt / "model.pt")) {
      INFO(ckpt);
      CHECK_NOTHROW(load_backbone(ckpt.string(), torch::kCPU));
    }
  }
}

}  // namespace

TEST_CASE("train: a write that fails at any point is one error line, the run failed and resumable, nothing truncated",
          "[reliability][writes][cli]") {
  test::TempDir dir("write_fail_train");
  // The bytes the checkpoints of a whole run write, measured on a clean run.
  const std::string clean_db = (dir.path / "clean.sqlite").string();
  auto clean = run_with("MNEMO_THREADS=1", std::string("train") + kMqarTrain + " --db " + clean_db + " --out " +
                                               (dir.path / "clean").string());
  INFO(clean.output);
  REQUIRE(clean.exit_code == 0);
  int64_t checkpoint_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path / "clean" / "checkpoint"))
    if (e.is_regular_file()) checkpoint_bytes += static_cast<int64_t>(e.file_size());
  REQUIRE(checkpoint_bytes > 1000);
  // Before the first byte, inside config.json, inside model.pt, inside optim.pt, in the second checkpoint.
  for (const int64_t limit : {int64_t{0}, int64_t{100}, checkpoint_bytes / 4, checkpoint_bytes * 3 / 4,
                              checkpoint_bytes + checkpoint_bytes / 2}) {
    DYNAMIC_SECTION("MNEMO_FAIL_WRITE_AFTER_BYTES=" << limit) {
      const std::string db = (dir.path / ("r" + std::to_string(limit) + ".sqlite")).string();
      const fs::path out = dir.path / ("run" + std::to_string(limit));
      const std::string args = std::string("train") + kMqarTrain + " --db " + db + " --out " + out.string();
      auto r = run_with("MNEMO_THREADS=1 MNEMO_FAIL_WRITE_AFTER_BYTES=" + std::to_string(limit), args);
      check_one_error_line(r);
      CHECK_THAT(r.output, Catch::Contains("cannot write " + out.string()));
      CHECK_THAT(r.output, Catch::Contains("No space left on device"));
      check_nothing_truncated(out);
      {
        ResultsDB rdb(db);
        REQUIRE(rdb.runs().size() == 1);
        CHECK(rdb.runs()[0].status == "failed");
      }
      // The same command with --resume finishes the run.
      auto again = run_with("MNEMO_THREADS=1", args + " --resume");
      INFO(again.output);
      CHECK(again.exit_code == 0);
      ResultsDB rdb(db);
      REQUIRE(rdb.runs().size() == 1);
      CHECK(rdb.runs()[0].status == "completed");
      check_nothing_truncated(out);
    }
  }
  SECTION("a real file size limit (ulimit -f, SIGXFSZ ignored): the same, no abort") {
    const std::string db = (dir.path / "ulimit.sqlite").string();
    const fs::path out = dir.path / "ulimit";
    {  // the database first, with no limit: the limit then hits the checkpoint
      ResultsDB rdb(db);
    }
    const std::string args = std::string("train") + kMqarTrain + " --db " + db + " --out " + out.string();
    auto r = run_file_limited(std::max<int64_t>(1, checkpoint_bytes / 1024 / 3), args);
    check_one_error_line(r);
    CHECK_THAT(r.output, Catch::Contains("File too large"));
    check_nothing_truncated(out);
    auto again = run_with("MNEMO_THREADS=1", args + " --resume");
    INFO(again.output);
    CHECK(again.exit_code == 0);
  }
}

TEST_CASE("eval --tasks, generate, token shards: a failed write leaves no file under a final name and no rows",
          "[reliability][writes][cli]") {
  test::TempDir dir("write_fail_eval");
  const fs::path lm = train_lm(dir.path);
  const std::string eval_args = "eval --checkpoint " + lm.string() + " --tasks piqa,arc_easy --limit 2 --max-length 512 "
                                "--log-samples";
  for (const int64_t limit : {0, 300, 3000}) {
    INFO("MNEMO_FAIL_WRITE_AFTER_BYTES=" << limit);
    const std::string db = (dir.path / ("e" + std::to_string(limit) + ".sqlite")).string();
    const fs::path out = dir.path / ("eval" + std::to_string(limit));
    auto r = run_with("MNEMO_THREADS=1 MNEMO_FAIL_WRITE_AFTER_BYTES=" + std::to_string(limit),
                      eval_args + " --db " + db + " --output-path " + out.string());
    check_one_error_line(r);
    CHECK_THAT(r.output, Catch::Contains("No space left on device"));
    CHECK(!fs::exists(out / "results.json"));
    CHECK(!fs::exists(out / "samples_piqa.jsonl"));
    CHECK(!fs::exists(db));  // the rows are written after the files
    check_no_temporaries(dir.path);
    // Rerun: the same command completes.
    auto again = run_with("MNEMO_THREADS=1", eval_args + " --db " + db + " --output-path " + out.string());
    INFO(again.output);
    CHECK(again.exit_code == 0);
    CHECK(fs::exists(out / "results.json"));
  }
  {  // generate --out
    const fs::path file = dir.path / "gen" / "mqar.jsonl";
    auto r = run_with("MNEMO_FAIL_WRITE_AFTER_BYTES=500",
                      "generate mqar --n 50 --num-kv-pairs 2 --out " + file.string());
    check_one_error_line(r);
    CHECK_THAT(r.output, Catch::Contains("cannot write " + file.string() + ": No space left on device"));
    CHECK(!fs::exists(file));
    check_no_temporaries(dir.path / "gen");
  }
  {  // a language model's token shards (built on the first run into its cache folder)
    test::TempDir fresh("write_fail_shard");
    const fs::path cfg = write_lm_config(fresh.path);
    const std::string args = "train --config " + cfg.string() + " --db " + (fresh.path / "r.sqlite").string() +
                             " --out " + (fresh.path / "lm").string() + " --quiet";
    auto r = run_with("MNEMO_THREADS=1 MNEMO_FAIL_WRITE_AFTER_BYTES=200", args);
    check_one_error_line(r);
    CHECK_THAT(r.output, Catch::Contains("No space left on device"));
    check_no_temporaries(fresh.path);
    auto again = run_with("MNEMO_THREADS=1", args);
    INFO(again.output);
    CHECK(again.exit_code == 0);
  }
  {  // the standard output
    auto r = run_with("(", "--version > /dev/full)");  // stderr stays on the pipe
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("mnemo: error: cannot write to the standard output"));
  }
}

TEST_CASE("SIGTERM during eval --tasks: one interrupted line, exit 143, nothing written", "[reliability][signals][cli]") {
  test::TempDir dir("eval_signal");
  const fs::path lm = train_lm(dir.path);
  const std::string db = (dir.path / "r.sqlite").string(), out = (dir.path / "out").string(),
                    log = (dir.path / "log").string();
  // The first task is short, the second long enough to be interrupted: SIGTERM once its first line is logged. The
  // script runs the evaluation in the background (`&`), where a non-interactive shell starts it with SIGINT ignored.
  const std::string script =
      "MNEMO_THREADS=1 " + std::string(MNEMO_BINARY) + " eval --checkpoint " + lm.string() +
      " --tasks arc_easy,piqa --limit 400 --max-length 2048 --log-samples --db " + db + " --output-path " + out +
      " > " + log + " 2>&1 & pid=$!; for i in $(seq 600); do grep -q '^\\[piqa\\] ' " + log +
      " && break; sleep 0.05; done; kill -TERM $pid; wait $pid; echo \"rc=$?\"";
  test::write_text_file(dir.path / "interrupt.sh", script + "\n");
  FILE* p = popen(("bash " + (dir.path / "interrupt.sh").string()).c_str(), "r");
  std::string text;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  pclose(p);
  const std::string logged = read_text_file(log);
  INFO(logged);
  CHECK_THAT(logged, Catch::Contains("[arc_easy] done in"));  // the first task was scored before the signal
  CHECK_THAT(text, Catch::Contains("rc=143"));
  CHECK(count_of(logged, "mnemo: interrupted by SIGTERM: eval --tasks stopped before every task was scored; "
                         "nothing written") == 1);
  CHECK(logged.find("mnemo: error:") == std::string::npos);
  CHECK(!fs::exists(out));
  CHECK(!fs::exists(db));
}

TEST_CASE("a prompt longer than the default max_length raises it, and a --max-length given names task and document",
          "[reliability][cli]") {
  test::TempDir dir("max_length");
  const fs::path lm = train_lm(dir.path);  // seq_len 64, byte-level: PIQA's requests are longer
  const std::string args = "eval --checkpoint " + lm.string() + " --tasks piqa --limit 2 --db " +
                           (dir.path / "r.sqlite").string() + " --output-path " + (dir.path / "out").string();
  auto r = run_with("MNEMO_THREADS=1", args);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(std::regex_search(r.output, std::regex(R"(\[piqa\] max_length [0-9]+ \(its longest request; the default 64 )")));
  const json results = read_json_file((dir.path / "out" / "results.json").string());
  CHECK(results.at("results").contains("piqa"));
  auto given = run_with("MNEMO_THREADS=1", args + " --max-length 64");
  check_one_error_line(given);
  CHECK(std::regex_search(given.output,
                          std::regex(R"(mnemo: error: task piqa, document [0-9]+: the continuation has [0-9]+ tokens, )"
                                     R"(more than --max-length 64; give --max-length [0-9]+)")));
}

TEST_CASE("failed evaluations leave no database and no output folder", "[reliability][cli]") {
  test::TempDir dir("eval_nothing");
  const fs::path lm = train_lm(dir.path);
  const std::string db = (dir.path / "r.sqlite").string(), out = (dir.path / "out").string();
  const std::string base = "eval --checkpoint " + lm.string() + " --tasks piqa --limit 2 --db " + db +
                           " --output-path " + out;
  // A data folder without PIQA, and one whose PIQA differs from the reference copy.
  const fs::path empty_data = dir.path / "empty_data", changed_data = dir.path / "changed_data";
  fs::create_directories(empty_data);
  const fs::path piqa = fs::path(data_dir()) / "eval" / "piqa";
  fs::create_directories(changed_data / "eval" / "piqa");
  fs::copy_file(piqa / "valid-labels.lst", changed_data / "eval" / "piqa" / "valid-labels.lst");
  test::write_text_file(changed_data / "eval" / "piqa" / "valid.jsonl",
                        test::slurp(piqa / "valid.jsonl") + "\n");  // one byte more
  for (const auto& [what, extra, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"a tokenizer of another vocabulary", " --tokenizer byte:plain --allow-other-tokenizer", "tokens but the model"},
           {"a missing data file", " --data-dir " + empty_data.string(), "not found"},
           {"a checksum mismatch", " --data-dir " + changed_data.string(), "SHA-256"},
           {"--max-length 0", " --max-length 0", "--max-length"}}) {
    INFO(what);
    auto r = run_with("MNEMO_THREADS=1", base + extra);
    check_one_error_line(r);
    CHECK_THAT(r.output, Catch::Contains(message));
    CHECK(!fs::exists(db));
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("eval: an empty --tasks and --checkpoint with --requests-only are named as such", "[reliability][cli]") {
  auto empty = test::run_mnemo("eval --tasks '' --limit 3");
  check_one_error_line(empty);
  CHECK_THAT(empty.output, Catch::Contains("mnemo: error: eval: --tasks '' names no task"));
  CHECK(empty.output.find("goes with --tasks") == std::string::npos);
  test::TempDir dir("requests_only");
  auto both = test::run_mnemo("eval --checkpoint " + dir.path.string() + " --tasks piqa --requests-only");
  check_one_error_line(both);
  CHECK_THAT(both.output, Catch::Contains("--requests-only writes the requests without a model"));
}

namespace {

// A rows API for the download test: `total` rows of about 100 bytes, pages of up to 100 (the datasets-server format).
test::HttpReply serve_fixture_rows(const test::HttpRequest& r, int total) {
  const int offset = std::stoi(r.params.at("offset")), length = std::stoi(r.params.at("length"));
  nlohmann::ordered_json page;
  page["rows"] = nlohmann::ordered_json::array();
  for (int i = offset; i < std::min(total, offset + length); ++i)
    page["rows"].push_back({{"row_idx", i},
                            {"row", {{"text", "document " + std::to_string(i) + std::string(80, 'x')}, {"key", i}}},
                            {"truncated_cells", nlohmann::ordered_json::array()}});
  page["num_rows_total"] = total;
  page["partial"] = false;
  return test::HttpReply{200, page.dump(), {}, -1};
}

}  // namespace

TEST_CASE("data fetch: a failed write at any point keeps the download resumable, no truncated file under its name",
          "[reliability][writes][data_fetch]") {
  if (!http_available()) {
    WARN("skipped: this build has no libcurl");
    return;
  }
  ::setenv("no_proxy", "127.0.0.1,localhost", 1);
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  constexpr int kTotal = 250;
  test::HttpTestServer server([](const test::HttpRequest& r) { return serve_fixture_rows(r, kTotal); });
  const RecallSource source{"fda", "test/recall-fixture", "default", "validation"};
  for (const int64_t limit : {0, 5000, 15000, 26000, 28000}) {
    DYNAMIC_SECTION("writes fail after " << limit << " bytes") {
      test::TempDir dir("fetch_write_fail");
      FetchOptions o;
      o.endpoint = server.url();
      o.out_dir = dir.path.string();
      o.page_size = 100;
      o.http.max_retries = 0;
      inject_write_failure_after(limit);
      try {
        fetch_recall_source(source, o);
        FAIL("the fetch succeeded although its writes fail after " << limit << " bytes");
      } catch (const Error& e) {
        inject_write_failure_after(-1);
        CHECK_THAT(e.what(), Catch::Contains("No space left on device"));
      }
      inject_write_failure_after(-1);
      CHECK(!fs::exists(dir.path / "fda.jsonl"));
      check_no_temporaries(dir.path);
      if (fs::exists(dir.path / "CHECKSUMS.json")) CHECK_NOTHROW(read_json_file((dir.path / "CHECKSUMS.json").string()));
      // The same fetch again completes, with every row once.
      const FetchResult done = fetch_recall_source(source, o);
      CHECK(done.status == "fetched");
      CHECK(test::read_jsonl(dir.path / "fda.jsonl").size() == kTotal);
    }
  }
  inject_write_failure_after(-1);
}
