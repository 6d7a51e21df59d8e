// Progress output: the trainer's progress line read back by a sweep (format and parse agree), the sweep's
// ETA, reading a log that is still being written, and a sweep whose stdout is a pipe printing its cells'
// progress and its total while the workers' train.log files fill with step lines.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/progress.h"
#include "engine/tools/sweep_progress.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

TEST_CASE("progress: a trainer's progress line parses back to its numbers", "[progress]") {
  TrainProgress p;
  p.run_id = 12;
  p.step = 40;
  p.steps = 200;
  p.loss = 2.31;
  p.held_name = "test accuracy";
  p.held = 0.125;
  p.lr = 1e-3;
  p.tokens_per_s = 5400;
  p.eta_s = 125;
  const std::string line = format_train_progress(p);
  CHECK(line == "[run 12] step 40/200 | loss 2.3100 | test accuracy 0.1250 | lr 1.00e-03 | 5400 tok/s | ETA 2m05s");
  auto q = parse_train_progress(line);
  REQUIRE(q);
  CHECK(q->run_id == 12);
  CHECK(q->step == 40);
  CHECK(q->steps == 200);
  CHECK(q->loss == Approx(2.31));
  CHECK(q->held_name == "test accuracy");
  CHECK(q->held == Approx(0.125));
  CHECK(q->lr == Approx(1e-3));
  CHECK(q->tokens_per_s == Approx(5400));
  CHECK(q->eta_s == Approx(125));
  CHECK_FALSE(q->show_ppl);

  SECTION("language modelling: ppl after the loss, no held-out value yet") {
    p.show_ppl = true;
    p.held_name = "val ppl";
    p.held = NAN;
    p.eta_s = 7300;
    auto r = parse_train_progress(format_train_progress(p));
    REQUIRE(r);
    CHECK(r->show_ppl);
    CHECK(r->held_name == "val ppl");
    CHECK(std::isnan(r->held));
    CHECK(r->eta_s == Approx(7260));  // "2h01m": minutes
  }
  SECTION("other lines are not progress") {
    CHECK_FALSE(parse_train_progress(""));
    CHECK_FALSE(parse_train_progress(R"({"run_id": 3, "steps": 20})"));
    CHECK_FALSE(parse_train_progress("mnemo: error: something | else"));
    CHECK_FALSE(parse_train_progress("[run 3] early stop: test accuracy 0.9950 > 0.9900"));
    CHECK_FALSE(parse_train_progress(line.substr(0, line.size() - 12)));  // cut before the ETA
  }
}

TEST_CASE("progress: durations read back", "[progress]") {
  for (double s : {0.0, 42.0, 125.0, 3599.0})
    CHECK(parse_duration(format_duration(s)) == Approx(s));
  CHECK(parse_duration("2h01m") == Approx(7260));
  CHECK_FALSE(parse_duration(""));
  CHECK_FALSE(parse_duration("12"));
  CHECK_FALSE(parse_duration("5x"));
}

TEST_CASE("progress: the sweep's ETA from its running cells and the cells finished so far", "[progress]") {
  TrainProgress p;
  p.step = 50;
  p.steps = 100;
  p.eta_s = 10;
  std::vector<SweepCellStatus> running{{"a", "", 10, p}, {"b", "", 2, std::nullopt}};
  // Nothing finished: a cell is projected from a's 10 s run + 10 s left = 20 s; b has 18 s left, 2 queued.
  auto eta = sweep_eta(running, 2, 2, {});
  REQUIRE(eta);
  CHECK(*eta == Approx((10 + 18 + 2 * 20) / 2.0));
  // Finished cells took 30 s on average.
  eta = sweep_eta(running, 1, 2, {20, 40});
  REQUIRE(eta);
  CHECK(*eta == Approx((10 + 28 + 30) / 2.0));
  // Never less than the longest running cell.
  p.eta_s = 500;
  CHECK(*sweep_eta({{"a", "", 10, p}}, 0, 4, {}) == Approx(500));
  CHECK_FALSE(sweep_eta({{"b", "", 2, std::nullopt}}, 3, 2, {}));
}

TEST_CASE("progress: a log is read up to its last whole line", "[progress]") {
  const fs::path dir = test::temp_dir("progress_tail");
  const fs::path log = dir / "train.log";
  std::ofstream(log) << "an earlier attempt's line\n";
  const auto offset = static_cast<long long>(fs::file_size(log));
  ProgressTail tail(log.string(), offset);
  CHECK_FALSE(tail.poll());
  TrainProgress p;
  p.step = 10;
  p.steps = 20;
  p.loss = 1;
  p.held_name = "test accuracy";
  p.lr = 1e-3;
  const std::string line = format_train_progress(p);
  {
    std::ofstream f(log, std::ios::app);
    f << line.substr(0, 20);  // a line being written
  }
  CHECK_FALSE(tail.poll());
  {
    std::ofstream f(log, std::ios::app);
    f << line.substr(20) << "\n";
  }
  REQUIRE(tail.poll());
  CHECK(tail.latest()->step == 10);
}

TEST_CASE("sweep: stdout to a pipe shows each cell's progress and the sweep's total, and each train.log has step lines",
          "[progress][cli][e2e]") {
  const fs::path dir = test::temp_dir("sweep_progress");
  // Two tiny cells with enough steps (a progress line every 20) to run for a few seconds each.
  std::ofstream(dir / "sweep.json") << R"({"name": "progress", "base": {"model": "transformer", "task": "mqar",
      "vocab_size": 128, "steps": 400, "eval_every": 200, "log_every": 20, "n_test": 16, "n_train": 256,
      "early_stop_acc": 0,
      "batch_size": 4, "d_model": 16, "n_heads": 1, "n_layers": 1}, "grid": {"lr": [0.001, 0.002]}})";
  auto r = test::run_mnemo("sweep --config " + (dir / "sweep.json").string() + " --jobs 2 --progress-every 0.2 --db " +
                           (dir / "r.sqlite").string() + " --out " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("\x1b[") == std::string::npos);  // a pipe gets no terminal control
  // Per-cell lines: "  transformer: step 40/400 | loss ... | test accuracy ... | ... tok/s | ETA ...  (mqar ... lr=0.001)"
  for (const char* lr : {"lr=0.001", "lr=0.002"})
    CHECK(std::regex_search(r.output, std::regex(std::string("  transformer: step [0-9]+/400 \\| loss [0-9.]+ \\| "
                                                             "test accuracy [-0-9.]+ \\| [0-9]+ tok/s \\| ETA [0-9hms]+  "
                                                             "\\(mqar .*") + lr + "\\)")));
  CHECK(std::regex_search(r.output, std::regex("sweep 'progress': [0-9]/2 cells done, [0-2] running \\| .* elapsed \\| ETA ")));
  CHECK_THAT(r.output, Catch::Contains("2 completed"));
  int logs = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir / "runs")) {
    if (entry.path().filename() != "train.log") continue;
    ++logs;
    std::ifstream f(entry.path());
    std::string line;
    int steps = 0;
    while (std::getline(f, line)) steps += parse_train_progress(line) ? 1 : 0;
    INFO(entry.path().string());
    CHECK(steps == 20);  // every 20 of 400 steps
  }
  CHECK(logs == 2);
}

TEST_CASE("progress: on a terminal the block is redrawn in place, each line cut to the width", "[progress]") {
  const fs::path dir = test::temp_dir("progress_live");
  const fs::path log = dir / "train.log";
  TrainProgress p;
  p.step = 5;
  p.steps = 50;
  p.loss = 3;
  p.held_name = "test accuracy";
  p.lr = 1e-3;
  p.eta_s = 30;
  std::ofstream(log) << format_train_progress(p) << "\n";
  ::setenv("COLUMNS", "60", 1);  // the test's stdout is no terminal: the width comes from $COLUMNS
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  {
    SweepProgress progress("live", 3, 2, /*live=*/true, 30, out);
    progress.started(101, "transformer", "mqar d_model=64 lr=0.001 seq_len=128 num_kv_pairs=32", log.string(), 0, 0.0);
    progress.tick(0.0, 0);
    progress.tick(0.5, 0);  // within the second: not redrawn
    progress.tick(1.5, 0);
    progress.clear();
  }
  ::unsetenv("COLUMNS");
  std::rewind(out);
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, out)) text.append(buf, n);
  std::fclose(out);
  // Two draws of two lines (the cell, the total): the second and the final clear move up over the first.
  size_t ups = 0;
  for (size_t at = 0; (at = text.find("\x1b[2A\r\x1b[J", at)) != std::string::npos; ++at) ++ups;
  CHECK(ups == 2);
  std::string plain = std::regex_replace(text, std::regex("\x1b\\[[0-9]*[AJ]|\r"), "");
  std::istringstream lines(plain);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    INFO(line);
    CHECK(line.size() <= 59);
  }
  CHECK(n == 4);
  CHECK_THAT(plain, Catch::Contains("  transformer: step 5/50 | loss 3.0000") && Catch::Contains("..."));
  CHECK_THAT(plain, Catch::Contains("sweep 'live': 0/3 cells done, 1 running"));
}
