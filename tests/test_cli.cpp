// The CLI as a user meets it: bad inputs end in one clear message and a non-zero exit.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/system_info.h"
#include "results/db.h"
#include "test_util.h"

using mnemo::test::run_mnemo;
using mnemo::test::run_mnemo_env;
using mnemo::test::temp_dir;

TEST_CASE("mnemo --version names LibTorch and the BLAS", "[cli]") {
  auto r = run_mnemo("--version");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("LibTorch 1.") || Catch::Contains("LibTorch 2."));
  REQUIRE_THAT(r.output, Catch::Contains("BLAS: "));
  REQUIRE_THAT(r.output, Catch::Contains("CUDA: "));
  REQUIRE_THAT(r.output, Catch::Contains("CPU allocator: "));
}

TEST_CASE("without a thread setting mnemo takes the cores the load average leaves idle", "[cli]") {
  // ctest sets OMP_NUM_THREADS=1 for every test: the child runs without it (and without MNEMO_THREADS).
  auto r = run_mnemo_env("env -u OMP_NUM_THREADS -u MNEMO_THREADS", "--version");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("(the idle cores: "));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double load = 0.0;
  const int expected = mnemo::idle_cores(cores, &load);
  REQUIRE(expected >= 1);
  REQUIRE(expected <= cores);
  // the load can move between the two readings by a core at most
  const auto pos = r.output.find("intra-op threads: ");
  REQUIRE(pos != std::string::npos);
  const int chosen = std::stoi(r.output.substr(pos + 18));
  REQUIRE(chosen >= std::max(1, expected - 1));
  REQUIRE(chosen <= std::min(cores, expected + 1));
  // an explicit setting wins and is named
  auto set = run_mnemo_env("env -u OMP_NUM_THREADS MNEMO_THREADS=1", "--version");
  REQUIRE_THAT(set.output, Catch::Contains("intra-op threads: 1 ($MNEMO_THREADS)"));
}

namespace {
// `mnemo --version` as is, and with the environment variable `name` set to "0" (a start-up setting's off switch):
// each line `expect_on` / `expect_off` in the respective output.
void check_startup_switch(const char* name, const std::string& expect_on, const std::string& expect_off) {
  auto on = run_mnemo("--version");
  REQUIRE_THAT(on.output, Catch::Contains(expect_on));
  ::setenv(name, "0", 1);  // inherited by the child process
  auto off = run_mnemo("--version");
  ::unsetenv(name);
  REQUIRE(off.exit_code == 0);
  REQUIRE_THAT(off.output, Catch::Contains(expect_off));
}
}  // namespace

#if defined(__GLIBC__)
TEST_CASE("the glibc allocator tuning is applied, and MNEMO_MALLOC_TUNING=0 leaves the defaults", "[cli]") {
  check_startup_switch("MNEMO_MALLOC_TUNING", "CPU allocator: glibc malloc, tuned",
                       "CPU allocator: glibc defaults (MNEMO_MALLOC_TUNING=0)");
}
#endif

#if defined(__x86_64__)
TEST_CASE("subnormal floats are flushed to zero, and MNEMO_FLUSH_DENORMAL=0 keeps them", "[cli]") {
  // this process (tests/main.cpp configures it as the mnemo binary does): 1e-38 / 4 is subnormal in fp32
  auto tiny = torch::full({4}, 1e-38f) / 4.f;
  CHECK(tiny.eq(0).all().item<bool>());
  check_startup_switch("MNEMO_FLUSH_DENORMAL", "denormals: flushed to zero (FTZ/DAZ)",
                       "denormals: kept (MNEMO_FLUSH_DENORMAL=0)");
}
#endif

TEST_CASE("mnemo models and tasks list the registry (text and JSON)", "[cli]") {
  auto m = run_mnemo("models --json");
  REQUIRE(m.exit_code == 0);
  auto models = nlohmann::json::parse(m.output);
  bool has_transformer = false, has_swa = false;
  for (const auto& e : models) {
    has_transformer |= e["name"] == "transformer";
    has_swa |= e["name"] == "swa" && e["defaults"]["window"] == 2048;
  }
  REQUIRE(has_transformer);
  REQUIRE(has_swa);
  auto t = run_mnemo("tasks");
  REQUIRE(t.exit_code == 0);
  REQUIRE_THAT(t.output, Catch::Contains("mqar") && Catch::Contains("--num_kv_pairs"));
}

TEST_CASE("mnemo generate mqar writes Zoology-style JSONL", "[cli][mqar]") {
  auto dir = temp_dir("gen");
  auto out = (dir / "m.jsonl").string();
  auto r = run_mnemo("generate mqar --vocab-size 256 --seq-len 64 --num-kv-pairs 4 --n 5 --seed 1 --out " + out);
  REQUIRE(r.exit_code == 0);
  std::ifstream f(out);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    REQUIRE(j["input_ids"].size() == 64);
    REQUIRE(j["labels"].size() == 64);
    ++n;
  }
  REQUIRE(n == 5);
  auto bad = run_mnemo("generate mqar --seq-len 63 --n 1 --out " + out);
  REQUIRE(bad.exit_code != 0);
  REQUIRE_THAT(bad.output, Catch::Contains("seq_len must be even"));
  auto unknown = run_mnemo("generate mqar --sequence-length 64 --n 1 --out " + out);
  REQUIRE(unknown.exit_code != 0);
  REQUIRE_THAT(unknown.output, Catch::Contains("unknown parameter 'sequence_length'"));
}

TEST_CASE("bad inputs: unknown model/task, missing file, malformed JSON, unknown key", "[cli]") {
  auto dir = temp_dir("bad");
  auto db = (dir / "r.sqlite").string();
  auto r1 = run_mnemo("train --model nosuchmodel --task mqar --db " + db);
  REQUIRE(r1.exit_code != 0);
  REQUIRE_THAT(r1.output, Catch::Contains("unknown model 'nosuchmodel'"));
  auto r2 = run_mnemo("train --model transformer --task nosuchtask --db " + db);
  REQUIRE(r2.exit_code != 0);
  REQUIRE_THAT(r2.output, Catch::Contains("unknown task 'nosuchtask'"));
  auto r3 = run_mnemo("train --config " + (dir / "missing.json").string() + " --db " + db);
  REQUIRE(r3.exit_code != 0);
  REQUIRE_THAT(r3.output, Catch::Contains("missing.json"));
  std::ofstream(dir / "bad.json") << "{\"model\": \"transformer\", ";
  auto r4 = run_mnemo("train --config " + (dir / "bad.json").string() + " --db " + db);
  REQUIRE(r4.exit_code != 0);
  REQUIRE_THAT(r4.output, Catch::Contains("malformed JSON") && Catch::Contains("bad.json"));
  auto r5 = run_mnemo("train --model transformer --task mqar --set lr_max=1 --db " + db);
  REQUIRE(r5.exit_code != 0);
  REQUIRE_THAT(r5.output, Catch::Contains("unknown config key 'lr_max'"));
  auto r6 = run_mnemo("eval --checkpoint " + (dir / "nothing").string() + " --db " + db);
  REQUIRE(r6.exit_code != 0);
  REQUIRE_THAT(r6.output, Catch::Contains("checkpoint not found"));
  auto r7 = run_mnemo("sweep --config " + (dir / "bad.json").string() + " --db " + db);
  REQUIRE(r7.exit_code != 0);
  // nothing was logged by the failed commands
  mnemo::ResultsDB results(db);
  REQUIRE(results.runs().empty());
}

TEST_CASE("train -> eval -> sweep skip, through the CLI", "[cli][e2e]") {
  auto dir = temp_dir("flow");
  auto db = (dir / "r.sqlite").string();
  auto run_dir = (dir / "run").string();
  auto r = run_mnemo("train --model transformer --task mqar --set vocab_size=128 --set d_model=32 --set steps=20 "
                     "--set eval_every=10 --set n_test=64 --set batch_size=16 --db " + db + " --out " + run_dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("step 20/20") && Catch::Contains("tok/s") && Catch::Contains("ETA"));
  auto e = run_mnemo("eval --checkpoint " + run_dir + " --n 32 --db " + db);
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  REQUIRE_THAT(e.output, Catch::Contains("\"accuracy\""));
  auto e2 = run_mnemo("eval --checkpoint " + run_dir + " --num-kv-pairs 8 --seq-len 64 --n 16 --db " + db);
  REQUIRE(e2.exit_code == 0);
  // a sweep over two cells; re-running it skips both
  std::ofstream(dir / "sweep.json") << R"({"name": "t", "base": {"model": "transformer", "task": "mqar",
      "vocab_size": 128, "steps": 10, "eval_every": 10, "n_test": 32, "batch_size": 8, "d_model": 16},
      "grid": {"lr": [0.001, 0.003]}})";
  auto s1 = run_mnemo("sweep --config " + (dir / "sweep.json").string() + " --jobs 2 --db " + db + " --out " +
                      (dir / "sw").string());
  INFO(s1.output);
  REQUIRE(s1.exit_code == 0);
  REQUIRE_THAT(s1.output, Catch::Contains("2 completed"));
  auto s2 = run_mnemo("sweep --config " + (dir / "sweep.json").string() + " --db " + db);
  REQUIRE(s2.exit_code == 0);
  REQUIRE_THAT(s2.output, Catch::Contains("2 already completed"));
  mnemo::ResultsDB results(db);
  REQUIRE(results.runs().size() == 3);
}

TEST_CASE("generation tasks through the CLI: S-NIAH train -> eval cells, MAD generate alias", "[cli][sniah][mad]") {
  auto dir = temp_dir("gen_flow");
  auto db = (dir / "r.sqlite").string();
  auto run_dir = (dir / "run").string();
  // A few steps of a tiny model on S-NIAH-1 training examples (byte tokenizer, 520 tokens).
  auto r = run_mnemo("train --model transformer --task sniah_1 --set length=520 --set tokens_to_generate=8 "
                     "--set d_model=16 --set n_heads=2 --set steps=2 --set eval_every=2 --set n_test=2 "
                     "--set n_train=4 --set batch_size=2 --db " + db + " --out " + run_dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto e = run_mnemo("eval --checkpoint " + run_dir + " --task sniah_1 --lengths 460,520 --depths 0,100 --n 1 --db " +
                     db);
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  REQUIRE_THAT(e.output, Catch::Contains("\"cells\""));
  {
    mnemo::ResultsDB results(db);
    REQUIRE(results.evals("sniah_1").size() == 4);  // 2 lengths x 2 depths, one row each
  }
  auto bad = run_mnemo("eval --checkpoint " + run_dir + " --task sniah_1 --depths 101 --n 1 --db " + db);
  REQUIRE(bad.exit_code != 0);
  REQUIRE_THAT(bad.output, Catch::Contains("depth"));

  const std::string out = (dir / "mad.jsonl").string();
  auto g = run_mnemo("generate mad --task selective_copying --n 3 --seed 1 --out " + out);
  INFO(g.output);
  REQUIRE(g.exit_code == 0);
  REQUIRE_THAT(g.output, Catch::Contains("mad_selective_copying"));
  auto g_bad = run_mnemo("generate mad --n 3 --out " + out);
  REQUIRE(g_bad.exit_code != 0);
  REQUIRE_THAT(g_bad.output, Catch::Contains("--task"));
}
