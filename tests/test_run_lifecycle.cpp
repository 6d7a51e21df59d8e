// A run's life: resume of a completed run, cumulative summaries, crash-safe checkpoints,
// no test set, validation before the run row, one-line failure messages, checkpoint compatibility,
// adoption of a row left without a checkpoint, SIGINT/SIGTERM.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <map>

#include "core/file_tree.h"
#include "core/signals.h"
#include "engine/io/checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/training/trainer.h"
#include "results/db.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

json tiny_run() {
  return {{"model", "transformer"}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2},
          {"d_model", 16}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 8}, {"n_train", 64}, {"n_test", 16},
          {"steps", 6}, {"eval_every", 3}, {"log_every", 1}, {"early_stop_acc", 0.0}, {"device", "cpu"}};
}

TrainOptions options(const fs::path& dir, const std::string& out = "run") {
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / out).string();
  opt.quiet = true;
  return opt;
}

std::map<std::string, double> rows_of(const ResultsDB& db, int64_t run_id) {
  std::map<std::string, double> m;
  for (const auto& r : db.metrics(run_id)) m[std::to_string(r.step) + "/" + r.split + "/" + r.name] = r.value;
  return m;
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A folder that looks like a checkpoint at `step` (complete unless `complete` is false).
void fake_checkpoint(const fs::path& dir, int64_t step, bool complete = true) {
  write_text(dir / "config.json", "{}");
  write_text(dir / "model.pt", "weights");
  if (complete) write_text(dir / "trainer.json", json{{"step", step}, {"run_id", 1}}.dump());
}

int64_t step_in(const fs::path& dir) { return read_json_file((dir / "trainer.json").string()).at("step"); }

}  // namespace

TEST_CASE("resume of a completed run changes nothing, wall time and tokens add up over resumes", "[lifecycle]") {
  auto dir = test::temp_dir("lc_completed");
  json cfg = tiny_run();
  TrainOptions opt = options(dir);
  opt.stop_after = 3;
  auto first = train(cfg, opt);
  REQUIRE(first.stopped);
  REQUIRE(first.steps == 3);
  const TrainerState paused = load_trainer_state(opt.out_dir);
  REQUIRE(paused.wall_s > 0);
  REQUIRE(paused.train_tokens > 0);

  opt.stop_after = 0;
  opt.resume = true;
  auto second = train(cfg, opt);
  REQUIRE(second.run_id == first.run_id);
  REQUIRE(second.steps == 6);
  REQUIRE_FALSE(second.already_completed);
  const TrainerState done = load_trainer_state(opt.out_dir);
  REQUIRE(done.train_tokens == 2 * paused.train_tokens);  // 3 + 3 steps of the same size
  REQUIRE(done.wall_s > paused.wall_s);
  REQUIRE(second.wall_s >= done.wall_s);  // cumulative, not the last invocation only

  ResultsDB db(opt.db_path);
  REQUIRE(db.run(first.run_id)->status == "completed");
  auto before = rows_of(db, first.run_id);
  REQUIRE(before.at("6/summary/wall_s") == Approx(second.wall_s));
  REQUIRE(before.at("6/summary/tokens_per_s") > 0);

  auto third = train(cfg, opt);
  REQUIRE(third.already_completed);
  REQUIRE(third.run_id == first.run_id);
  REQUIRE(third.steps == 6);
  REQUIRE(third.wall_s == Approx(second.wall_s));
  REQUIRE(third.tokens_per_s == Approx(second.tokens_per_s));
  REQUIRE(rows_of(db, first.run_id) == before);
  REQUIRE(db.run(first.run_id)->status == "completed");
  REQUIRE(db.runs().size() == 1);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("n_test 0: no test rows and no best_test_accuracy, not zeros", "[lifecycle]") {
  auto dir = test::temp_dir("lc_no_test");
  json cfg = tiny_run();
  cfg["n_test"] = 0;
  TrainOptions opt = options(dir);
  auto r = train(cfg, opt);
  REQUIRE(r.steps == 6);
  REQUIRE(std::isnan(r.best_test_accuracy));
  REQUIRE(std::isnan(r.final_test_accuracy));
  ResultsDB db(opt.db_path);
  REQUIRE(db.run(r.run_id)->status == "completed");
  bool any_train = false;
  for (const auto& m : db.metrics(r.run_id)) {
    INFO(m.split << "/" << m.name);
    REQUIRE(m.split != "test");
    REQUIRE(m.name != "best_test_accuracy");
    any_train = any_train || m.split == "train";
  }
  REQUIRE(any_train);
  REQUIRE(has_checkpoint(opt.out_dir));  // checkpoints are still written at eval_every
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("recover_checkpoint keeps the newest complete checkpoint a crashed write left", "[lifecycle]") {
  auto dir = test::temp_dir("lc_recover");
  SECTION("crash between the two renames: only checkpoint.old is complete") {
    fake_checkpoint(dir / "checkpoint.old", 4);
    fake_checkpoint(dir / "checkpoint.tmp", 6, /*complete=*/false);
    REQUIRE(has_checkpoint(dir.string()));
    REQUIRE(fs::path(newest_complete_checkpoint(dir.string())).filename() == "checkpoint.old");
    REQUIRE_FALSE(recover_checkpoint(dir.string()).empty());
    REQUIRE(step_in(dir / "checkpoint") == 4);
  }
  SECTION("a complete checkpoint.tmp newer than checkpoint wins") {
    fake_checkpoint(dir / "checkpoint", 4);
    fake_checkpoint(dir / "checkpoint.tmp", 6);
    recover_checkpoint(dir.string());
    REQUIRE(step_in(dir / "checkpoint") == 6);
  }
  SECTION("after the second rename: checkpoint is newest, checkpoint.old is dropped") {
    fake_checkpoint(dir / "checkpoint", 6);
    fake_checkpoint(dir / "checkpoint.old", 4);
    REQUIRE(recover_checkpoint(dir.string()).empty());  // nothing recovered, leftovers removed
    REQUIRE(step_in(dir / "checkpoint") == 6);
  }
  SECTION("an incomplete checkpoint gives way to a complete older one") {
    fake_checkpoint(dir / "checkpoint", 6, /*complete=*/false);
    fake_checkpoint(dir / "checkpoint.old", 4);
    recover_checkpoint(dir.string());
    REQUIRE(step_in(dir / "checkpoint") == 4);
  }
  SECTION("nothing complete: no checkpoint") {
    fake_checkpoint(dir / "checkpoint.tmp", 6, /*complete=*/false);
    REQUIRE_FALSE(has_checkpoint(dir.string()));
  }
  REQUIRE_FALSE(fs::exists(dir / "checkpoint.old"));
  if (has_checkpoint(dir.string())) REQUIRE_FALSE(fs::exists(dir / "checkpoint.tmp"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("resume continues from checkpoint.old when a crash left no checkpoint in place", "[lifecycle]") {
  auto dir = test::temp_dir("lc_crash_resume");
  json cfg = tiny_run();
  TrainOptions opt = options(dir);
  auto full = train(cfg, options(dir, "reference"));

  opt.stop_after = 3;
  auto first = train(cfg, opt);
  REQUIRE(first.steps == 3);
  // The state a kill between "checkpoint -> checkpoint.old" and "checkpoint.tmp -> checkpoint" leaves.
  fs::rename(fs::path(opt.out_dir) / "checkpoint", fs::path(opt.out_dir) / "checkpoint.old");
  fake_checkpoint(fs::path(opt.out_dir) / "checkpoint.tmp", 5, /*complete=*/false);
  opt.stop_after = 0;
  opt.resume = true;
  auto second = train(cfg, opt);
  REQUIRE(second.run_id == first.run_id);  // not a new run from step 0
  REQUIRE(second.steps == 6);
  REQUIRE_FALSE(fs::exists(fs::path(opt.out_dir) / "checkpoint.old"));
  REQUIRE_FALSE(fs::exists(fs::path(opt.out_dir) / "checkpoint.tmp"));
  ResultsDB db(opt.db_path);
  REQUIRE(db.runs().size() == 2);  // the reference and this one
  REQUIRE(db.run(first.run_id)->status == "completed");
  auto a = rows_of(db, full.run_id), b = rows_of(db, first.run_id);
  REQUIRE(b.at("6/train/loss") == Approx(a.at("6/train/loss")).epsilon(1e-4));  // same trajectory
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("validation happens before the run row exists", "[lifecycle]") {
  auto dir = test::temp_dir("lc_validate");
  json cfg = tiny_run();
  write_text(dir / "a_file", "x");
  TrainOptions opt = options(dir);
  opt.out_dir = (dir / "a_file" / "run").string();  // a folder under a file: cannot be created
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("output folder"));

  json huge = cfg;
  huge["n_train"] = 100000000;
  REQUIRE_THROWS_WITH(train(huge, options(dir)), Catch::Contains("GB of examples") && Catch::Contains("n_train=0"));

  json bad_eval = cfg;
  bad_eval["eval_batch_size"] = 0;
  REQUIRE_THROWS_WITH(train(bad_eval, options(dir)), Catch::Contains("eval_batch_size"));

  ResultsDB db(opt.db_path);
  REQUIRE(db.runs().empty());
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a failed run records one line, never a trace", "[lifecycle]") {
  REQUIRE(one_line_message("\n  first line  \nframe #0: foo\nframe #1: bar") == "first line");
  REQUIRE(one_line_message(std::string(1000, 'x')).size() <= 300);
  REQUIRE(one_line_message("a\tb") == "a b");

  auto dir = test::temp_dir("lc_failed");
  json cfg = tiny_run();
  // AdamW's step size overflows float after the run row exists: LibTorch's conversion error (a
  // message with a backtrace) or a non-finite loss, depending on where the overflow is caught.
  cfg["lr"] = 1e38;
  cfg["steps"] = 20;
  TrainOptions opt = options(dir);
  REQUIRE_THROWS(train(cfg, opt));
  ResultsDB db(opt.db_path);
  REQUIRE(db.runs().size() == 1);
  const RunInfo run = db.runs()[0];
  REQUIRE(run.status == "failed");
  INFO(run.message);
  REQUIRE_FALSE(run.message.empty());
  REQUIRE(run.message.find('\n') == std::string::npos);
  REQUIRE(run.message.size() <= 300);
  REQUIRE(db.run_process(run.id).pid == static_cast<int64_t>(::getpid()));
  REQUIRE(db.run_process(run.id).host == hostname());
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("resume refuses a checkpoint whose model does not fit, and the run stays resumable", "[lifecycle]") {
  auto dir = test::temp_dir("lc_mismatch");
  json cfg = tiny_run();
  TrainOptions a = options(dir, "a");
  a.stop_after = 3;
  auto ra = train(cfg, a);
  json other = cfg;
  other["vocab_size"] = 128;
  TrainOptions b = options(dir, "b");
  b.stop_after = 3;
  train(other, b);
  // Run a's checkpoint now holds run b's weights (another vocabulary).
  const fs::path ca = fs::path(a.out_dir) / "checkpoint", cb = fs::path(b.out_dir) / "checkpoint";
  fs::copy_file(cb / "model.pt", ca / "model.pt", fs::copy_options::overwrite_existing);
  fs::copy_file(cb / "model.json", ca / "model.json", fs::copy_options::overwrite_existing);
  a.stop_after = 0;
  a.resume = true;
  REQUIRE_THROWS_WITH(train(cfg, a), Catch::Contains("vocab_size") && Catch::Contains("does not match"));
  fs::remove(ca / "model.json");  // without the description, the weights' shapes are checked
  REQUIRE_THROWS_WITH(train(cfg, a), Catch::Contains("does not fit this model"));
  ResultsDB db(a.db_path);
  REQUIRE(db.run(ra.run_id)->status == "stopped");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("train --resume without a checkpoint adopts the run's earlier row, a live one is refused", "[lifecycle]") {
  auto dir = test::temp_dir("lc_adopt");
  json cfg = tiny_run();
  TrainOptions opt = options(dir);
  RunInfo r;
  r.model = "transformer";
  r.task = "mqar";
  r.config_hash = config_hash(resolve_run_config(cfg));
  r.out_dir = opt.out_dir;
  int64_t id = 0;
  {
    ResultsDB db(opt.db_path);
    id = db.create_run(r);  // 'running', as a kill -9 before the first checkpoint leaves it
    db.set_run_process(id, static_cast<int64_t>(::getppid()), hostname());  // a live process
  }
  opt.resume = true;
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("still running"));
  {
    ResultsDB db(opt.db_path);
    db.set_run_process(id, 0, hostname());  // its process is gone
  }
  auto res = train(cfg, opt);
  REQUIRE(res.run_id == id);
  ResultsDB db(opt.db_path);
  REQUIRE(db.runs().size() == 1);
  REQUIRE(db.run(id)->status == "completed");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a running row whose process is gone shows as crashed (mnemo runs, report)", "[lifecycle][cli]") {
  auto dir = test::temp_dir("lc_crashed");
  const std::string db_path = (dir / "r.sqlite").string();
  const pid_t child = ::fork();  // a process that has ended: its pid is free
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  int64_t gone = 0, live = 0;
  {
    ResultsDB db(db_path);
    RunInfo r;
    r.model = "transformer";
    r.task = "mqar";
    gone = db.create_run(r);
    db.set_run_process(gone, child, hostname());
    live = db.create_run(r);
    db.set_run_process(live, static_cast<int64_t>(::getppid()), hostname());
    CHECK(db.observed_status(*db.run(gone)) == "crashed");
    CHECK(db.observed_status(*db.run(live)) == "running");
    CHECK(db.run(gone)->status == "running");  // observed, never rewritten by a reader
  }
  auto out = test::run_mnemo("runs --json --db " + db_path);
  REQUIRE(out.exit_code == 0);
  const json rows = json::parse(out.output);
  REQUIRE(rows.size() == 2);
  for (const json& row : rows) CHECK(row["status"] == (row["id"] == gone ? "crashed" : "running"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a stop request before the run starts records nothing", "[lifecycle]") {
  auto dir = test::temp_dir("lc_stop_early");
  request_stop(SIGTERM);
  TrainResult r;
  try {
    r = train(tiny_run(), options(dir));
  } catch (...) {
    clear_stop_request();
    throw;
  }
  clear_stop_request();
  REQUIRE(r.stop_signal == SIGTERM);
  REQUIRE(r.run_id == 0);
  ResultsDB db(options(dir).db_path);
  REQUIRE(db.runs().empty());
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("SIGINT / SIGTERM during mnemo train: checkpoint, status stopped, exit 130 / 143", "[lifecycle][cli]") {
  auto dir = test::temp_dir("lc_signal");
  const std::string db = (dir / "r.sqlite").string(), out = (dir / "run").string();
  const std::string args =
      " train --model transformer --task mqar --set vocab_size=64 --set seq_len=32 --set num_kv_pairs=2"
      " --set d_model=16 --set n_layers=1 --set n_heads=2 --set batch_size=8 --set n_train=64 --set n_test=16"
      " --set steps=1000000 --set eval_every=5 --quiet --db " + db + " --out " + out;
  // Starts training, waits for a checkpoint newer than `after`, sends `sig` (twice at once with `twice`, as
  // coreutils `timeout` does: to the command and to its process group), prints the exit status.
  auto interrupt = [&](const std::string& extra, const std::string& sig, int64_t after, bool twice = false) {
    const std::string script =
        "MNEMO_THREADS=1 " + std::string(MNEMO_BINARY) + args + extra + " > " + (dir / "log").string() + " 2>&1 & pid=$!; " +
        "for i in $(seq 1200); do s=$(sed -n 's/.*\"step\": *\\([0-9]*\\).*/\\1/p' " + out +
        "/checkpoint/trainer.json 2>/dev/null); [ -n \"$s\" ] && [ \"$s\" -gt " + std::to_string(after) +
        " ] && break; sleep 0.1; done; kill -" + sig + " $pid; " + (twice ? "kill -" + sig + " $pid; " : "") +
        "wait $pid; echo \"rc=$?\"";
    write_text(dir / "interrupt.sh", script + "\n");
    FILE* p = popen(("bash " + (dir / "interrupt.sh").string()).c_str(), "r");
    std::string text;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    pclose(p);
    return text;
  };
  REQUIRE_THAT(interrupt("", "INT", 0), Catch::Contains("rc=130"));
  const std::string log = read_text_file((dir / "log").string());
  INFO(log);
  REQUIRE_THAT(log, Catch::Contains("mnemo: interrupted by SIGINT"));
  int64_t stopped_at = 0;
  {
    ResultsDB rdb(db);
    REQUIRE(rdb.runs().size() == 1);
    const RunInfo run = rdb.runs()[0];
    REQUIRE(run.status == "stopped");
    REQUIRE_THAT(run.message, Catch::Contains("SIGINT"));
    stopped_at = run.last_step;
    REQUIRE(load_trainer_state(out).step == stopped_at);
  }
  // A request delivered twice at once still checkpoints and marks the run stopped (seen on the GPU machine under
  // `timeout -s TERM`, which used to exit at once without either).
  REQUIRE_THAT(interrupt(" --resume", "TERM", stopped_at, /*twice=*/true), Catch::Contains("rc=143"));
  ResultsDB rdb(db);
  REQUIRE(rdb.runs().size() == 1);  // the same run, resumed
  REQUIRE(rdb.runs()[0].status == "stopped");
  REQUIRE(rdb.runs()[0].last_step > stopped_at);
  mnemo::test::remove_dir_tree(dir);
}

// The checkpoint rotation removes folders with remove_tree, not std::filesystem::remove_all (core/file_tree.h).
TEST_CASE("remove_tree removes a folder tree and links but not their targets, a missing path is no error",
          "[lifecycle]") {
  namespace fs = std::filesystem;
  auto dir = test::temp_dir("remove_tree");
  fs::create_directories(dir / "tree/a/b");
  fs::create_directories(dir / "kept");
  std::ofstream(dir / "tree/a/b/file.txt") << "x";
  std::ofstream(dir / "tree/top.txt") << "y";
  std::ofstream(dir / "kept/target.txt") << "z";
  fs::create_symlink(dir / "kept", dir / "tree/a/link_to_kept");
  std::error_code ec;
  remove_tree((dir / "tree").string(), ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(fs::exists(dir / "tree"));
  CHECK(fs::exists(dir / "kept/target.txt"));  // the link went, not what it pointed to
  remove_tree((dir / "tree").string(), ec);
  CHECK_FALSE(ec);
  std::ofstream(dir / "single.txt") << "w";
  remove_tree((dir / "single.txt").string(), ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(fs::exists(dir / "single.txt"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("a database written under an older config-hash rule is rehashed once: its runs still resume and are skipped",
          "[lifecycle][db]") {
  auto dir = test::temp_dir("lc_rehash");
  const json cfg = resolve_run_config(tiny_run());
  const std::string db_path = (dir / "old.sqlite").string();
  int64_t kept = 0, moved = 0;
  {
    ResultsDB db(db_path);
    REQUIRE(db.config_hash_version() == 1);  // no meta row: a database from before versions
    RunInfo r;
    r.model = "transformer";
    r.task = "mqar";
    r.config_json = cfg.dump();
    r.config_hash = "0123456789abcdef";  // what an older rule made of it
    kept = db.create_run(r);
    RunInfo gone = r;
    json odd = cfg;
    odd["a_key_since_removed"] = 1;
    gone.config_json = odd.dump();
    gone.config_hash = "fedcba9876543210";
    moved = db.create_run(gone);
  }
  {
    ResultsDB db(db_path, OpenMode::read_only);
    rehash_runs_if_old(db);  // read-only: nothing written
    REQUIRE(db.run(kept)->config_hash == "0123456789abcdef");
  }
  ResultsDB db(db_path);
  rehash_runs_if_old(db);
  CHECK(db.config_hash_version() == kConfigHashVersion);
  CHECK(db.run(kept)->config_hash == config_hash(cfg));
  CHECK(db.run(moved)->config_hash == "fedcba9876543210");  // no longer resolves: left as it was
  // Once current, opening again changes nothing (a hash written by hand stays).
  db.exec("UPDATE runs SET config_hash = 'x' WHERE id = " + std::to_string(kept));
  rehash_runs_if_old(db);
  CHECK(db.run(kept)->config_hash == "x");
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("the config hash counts keys away from their model's and task's defaults, and model and task",
          "[lifecycle][db]") {
  const json base = resolve_run_config({{"model", "gated_deltanet"}, {"task", "mqar"}});
  CHECK(config_hash(resolve_run_config({{"model", "gated_deltanet"}, {"task", "mqar"}, {"chunk_size", base["chunk_size"]},
                                        {"num_kv_pairs", base["num_kv_pairs"]}})) == config_hash(base));
  CHECK(config_hash(resolve_run_config({{"model", "gated_deltanet"}, {"task", "mqar"}, {"chunk_size", 16}})) !=
        config_hash(base));
  CHECK(config_hash(resolve_run_config({{"model", "deltanet"}, {"task", "mqar"}})) != config_hash(base));
  CHECK(config_hash(resolve_run_config({{"model", "gated_deltanet"}, {"task", "mad_in_context_recall"}})) !=
        config_hash(base));
}
