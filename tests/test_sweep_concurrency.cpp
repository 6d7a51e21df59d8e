// Runs that never lie: two sweep processes on one DB run each cell once (leases + folder
// locks), stale leases are taken over, `eval` ties its rows to the run and replaces a cell's earlier
// value, `report` reads a read-only DB and refuses a SQLite file that is not mnemo's.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/common.h"
#include "results/db.h"
#include "file_util.h"
#include "test_util.h"

extern char** environ;

using mnemo::test::run_mnemo;
using mnemo::test::slurp;
using mnemo::test::temp_dir;
namespace fs = std::filesystem;

namespace {

const char* kTinyMqar =
    "--model transformer --task mqar --set d_model=16 --set n_layers=1 --set n_heads=2 --set seq_len=16 "
    "--set vocab_size=32 --set num_kv_pairs=2 --set steps=4 --set n_train=64 --set n_test=16 --set batch_size=8";

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Tables of a SQLite file, read with the C API (read-only).
std::set<std::string> sqlite_tables(const std::string& path) {
  sqlite3* db = nullptr;
  std::set<std::string> out;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table'", -1, &s, nullptr) ==
          SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) out.insert(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

}  // namespace

TEST_CASE("two sweep processes on one DB run every cell exactly once", "[reliability]") {
  auto dir = temp_dir("sweep_two");
  const std::string db = (dir / "r.sqlite").string(), cfg = (dir / "sweep.json").string();
  std::ofstream(cfg) << R"({"name": "two", "base": {"model": "transformer", "task": "mqar", "d_model": 16,
      "n_layers": 1, "n_heads": 2, "seq_len": 16, "vocab_size": 32, "num_kv_pairs": 2, "steps": 4,
      "n_train": 64, "n_test": 16, "batch_size": 8}, "grid": {"lr": [0.001, 0.002, 0.003]}})";
  const std::string one = std::string("MNEMO_THREADS=1 ") + MNEMO_BINARY + " sweep --config " + cfg + " --db " + db +
                          " --out " + (dir / "runs").string();
  const std::string cmd = "(" + one + " > " + (dir / "a.log").string() + " 2>&1; echo $? > " +
                          (dir / "a.rc").string() + ") & (" + one + " > " + (dir / "b.log").string() +
                          " 2>&1; echo $? > " + (dir / "b.rc").string() + ") & wait";
  REQUIRE(std::system(cmd.c_str()) == 0);
  INFO(slurp(dir / "a.log") + "\n----\n" + slurp(dir / "b.log"));
  CHECK(slurp(dir / "a.rc") == "0\n");
  CHECK(slurp(dir / "b.rc") == "0\n");
  mnemo::ResultsDB results(db);
  const auto runs = results.runs();
  std::map<std::string, int> completed_per_cell;
  for (const auto& r : runs) {
    CHECK(r.status == "completed");
    ++completed_per_cell[r.config_hash];
  }
  REQUIRE(runs.size() == 3);  // never a second run of a cell
  REQUIRE(completed_per_cell.size() == 3);
  for (const auto& [hash, n] : completed_per_cell) {
    CHECK(n == 1);
    CHECK_FALSE(results.lease(hash));  // released when its worker ended
  }
  // Each run has a folder of its own.
  std::set<std::string> dirs;
  for (const auto& r : runs) dirs.insert(r.out_dir);
  CHECK(dirs.size() == 3);
  // A third sweep finds everything done.
  auto again = run_mnemo("sweep --config " + cfg + " --db " + db + " --out " + (dir / "runs").string());
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("3 already completed"));
}

TEST_CASE("a sweep cell's lease: held while its owner lives, taken over when stale or gone", "[reliability]") {
  auto dir = temp_dir("lease");
  mnemo::ResultsDB db((dir / "r.sqlite").string());
  const std::string here = mnemo::hostname();
  const int64_t me = ::getpid();
  using mnemo::LeaseClaim;

  // Free: claimed; claiming again by its owner keeps it.
  REQUIRE(db.claim_cell("h_free", "s", me, here) == LeaseClaim::claimed);
  REQUIRE(db.claim_cell("h_free", "s", me, here) == LeaseClaim::claimed);
  REQUIRE(db.lease("h_free")->owner_pid == me);
  CHECK(db.refresh_lease("h_free", me, here));
  CHECK_FALSE(db.refresh_lease("h_free", me + 1, here));  // not the owner
  db.release_lease("h_free", me, here);
  CHECK_FALSE(db.lease("h_free"));

  // Another host, recent heartbeat: held. Silent for longer than the stale limit: taken over.
  db.put_lease({"h_remote", "s", "some-other-host", "", 4242, unix_now()});
  CHECK(db.claim_cell("h_remote", "s", me, here) == LeaseClaim::held);
  db.put_lease({"h_remote", "s", "some-other-host", "", 4242, unix_now() - 1000});
  CHECK(db.claim_cell("h_remote", "s", me, here, 300) == LeaseClaim::claimed);
  CHECK(db.lease("h_remote")->owner_host == here);
  CHECK(db.lease("h_remote")->owner_pid == me);

  // This host, a live owner (pid 1 always exists): held; an owner whose process is gone: taken over.
  db.put_lease({"h_live", "s", here, "", 1, unix_now()});
  CHECK(db.claim_cell("h_live", "s", me, here) == LeaseClaim::held);
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  db.put_lease({"h_dead", "s", here, "", child, unix_now()});
  CHECK(db.claim_cell("h_dead", "s", me, here) == LeaseClaim::claimed);
  CHECK(db.lease("h_dead")->owner_pid == me);

  // A completed run with the hash: nothing to claim, even over a live lease.
  mnemo::RunInfo r;
  r.model = "transformer";
  r.task = "mqar";
  r.config_hash = "h_live";
  r.status = "completed";
  db.create_run(r);
  CHECK(db.claim_cell("h_live", "s", me, here) == LeaseClaim::completed);
}

TEST_CASE("eval ties its rows to the run and replaces a cell's earlier value", "[reliability]") {
  auto dir = temp_dir("eval_twice");
  const std::string db = (dir / "r.sqlite").string(), run_dir = (dir / "run").string();
  auto t = run_mnemo(std::string("train ") + kTinyMqar + " --db " + db + " --out " + run_dir);
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  int64_t run_id = 0;
  {
    mnemo::ResultsDB results(db);
    REQUIRE(results.runs().size() == 1);
    run_id = results.runs()[0].id;
  }
  for (int i = 0; i < 2; ++i) {
    auto e = run_mnemo("eval --checkpoint " + run_dir + " --n 16 --db " + db);
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
  }
  {
    mnemo::ResultsDB results(db);
    std::map<std::string, int> per_metric;
    for (const auto& row : results.evals("mqar")) {
      CHECK(row.run_id == run_id);
      ++per_metric[row.metric];
    }
    REQUIRE(per_metric.count("accuracy") == 1);
    for (const auto& [metric, n] : per_metric) CHECK(n == 1);
  }
  // --keep-previous keeps both, the new row marked.
  auto k = run_mnemo("eval --checkpoint " + run_dir + " --n 16 --keep-previous --db " + db);
  INFO(k.output);
  REQUIRE(k.exit_code == 0);
  mnemo::ResultsDB results(db);
  std::vector<mnemo::EvalRow> acc;
  for (const auto& row : results.evals("mqar"))
    if (row.metric == "accuracy") acc.push_back(row);
  REQUIRE(acc.size() == 2);
  CHECK(nlohmann::json::parse(acc[1].details_json).value("kept_previous", 0) == 1);
  CHECK(acc[1].run_id == run_id);
}

TEST_CASE("report reads a read-only DB and refuses a SQLite file without mnemo's schema", "[reliability]") {
  auto dir = temp_dir("report_ro");
  const std::string db = (dir / "r.sqlite").string();
  { mnemo::ResultsDB results(db); }  // mnemo's schema, no rows
  REQUIRE(::chmod(db.c_str(), 0444) == 0);
  const std::string before = slurp(db);
  auto ok = run_mnemo("report --db " + db + " --out " + (dir / "rep").string());
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(fs::exists(dir / "rep" / "report.md"));
  CHECK(slurp(db) == before);
  ::chmod(db.c_str(), 0644);

  // A SQLite file of something else: refused by name, and left as it was (no mnemo tables added).
  const std::string foreign = (dir / "other.sqlite").string();
  {
    sqlite3* h = nullptr;
    REQUIRE(sqlite3_open(foreign.c_str(), &h) == SQLITE_OK);
    REQUIRE(sqlite3_exec(h, "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(h);
  }
  auto bad = run_mnemo("report --db " + foreign + " --out " + (dir / "rep2").string());
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Catch::Contains("mnemo: error:") && Catch::Contains(foreign) &&
                             Catch::Contains("not a mnemo results database"));
  CHECK(sqlite_tables(foreign) == std::set<std::string>{"notes"});

  // Not SQLite at all.
  const std::string text = (dir / "notes.txt").string();
  std::ofstream(text) << "just some text, long enough to be read as a header ........................\n";
  auto bad2 = run_mnemo("report --db " + text + " --out " + (dir / "rep3").string());
  CHECK(bad2.exit_code == 1);
  CHECK_THAT(bad2.output, Catch::Contains("mnemo: error:") && Catch::Contains(text));
}

TEST_CASE("SIGTERM to a sweep reaches its worker, which it waits for, exit 143", "[reliability]") {
  auto dir = temp_dir("sweep_term");
  const std::string db = (dir / "r.sqlite").string(), cfg = (dir / "sweep.json").string(),
                    out = (dir / "runs").string(), log = (dir / "sweep.log").string();
  // One cell far too long to finish before the signal.
  std::ofstream(cfg) << R"({"name": "term", "base": {"model": "transformer", "task": "mqar", "d_model": 16,
      "n_layers": 1, "n_heads": 2, "seq_len": 16, "vocab_size": 32, "num_kv_pairs": 2, "steps": 1000000,
      "eval_every": 1000000, "n_train": 64, "n_test": 16, "batch_size": 8}})";
  // Everything the child needs is made before fork (it only calls async-signal-safe functions).
  std::vector<std::string> args = {MNEMO_BINARY, "sweep", "--config", cfg, "--db", db, "--out", out}, env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("MNEMO_THREADS=", 0) != 0) env.emplace_back(*e);
  env.emplace_back("MNEMO_THREADS=1");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(log_fd >= 0);
  const pid_t sweep = ::fork();
  REQUIRE(sweep >= 0);
  if (sweep == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(log_fd);
  // Wait until the worker has created its run (it is training then).
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    ::usleep(100 * 1000);
    if (fs::exists(db)) {
      try {
        mnemo::ResultsDB results(db);
        started = !results.runs().empty();
      } catch (const std::exception&) {  // the sweep is still creating the file
      }
    }
  }
  INFO(slurp(log));
  REQUIRE(started);
  ::usleep(500 * 1000);  // a few steps in
  REQUIRE(::kill(sweep, SIGTERM) == 0);
  int status = 0;
  pid_t r = 0;
  for (int i = 0; i < 600 && r == 0; ++i) {
    r = ::waitpid(sweep, &status, WNOHANG);
    if (r == 0) ::usleep(100 * 1000);
  }
  if (r == 0) ::kill(sweep, SIGKILL), ::waitpid(sweep, &status, 0);
  INFO(slurp(log));
  REQUIRE(r == sweep);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);
  // No process is left training in the sweep's folder.
  int left = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(e.path() / "cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(out) != std::string::npos && cmdline.find(" train ") != std::string::npos) ++left;
  }
  CHECK(left == 0);
  // The worker stopped its run (train's own SIGTERM handling): resumable, never left `running`.
  mnemo::ResultsDB results(db);
  REQUIRE(results.runs().size() == 1);
  CHECK(results.runs()[0].status == "stopped");
  CHECK_FALSE(results.lease(results.runs()[0].config_hash));
}

TEST_CASE("put_evals replaces a cell's earlier rows, or keeps and marks them", "[reliability]") {
  auto dir = temp_dir("put_evals");
  mnemo::ResultsDB db((dir / "r.sqlite").string());
  mnemo::RunInfo run;
  run.model = "transformer";
  run.task = "mqar";
  run.config_hash = "h";
  const int64_t id = db.create_run(run);
  mnemo::EvalRow row;
  row.model = "transformer";
  row.task = "mqar";
  row.metric = "accuracy";
  row.setting_json = R"({"seq_len":16})";
  row.checkpoint = "/runs/x/checkpoint";
  row.value = 0.25;
  db.add_evals({row});  // written before eval rows were tied to runs: run_id NULL
  row.run_id = id;
  row.value = 0.5;
  db.put_evals({row});
  auto rows = db.evals("mqar");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].run_id == id);
  CHECK(rows[0].value == 0.5);
  auto other = row;
  other.setting_json = R"({"seq_len":32})";  // another cell: untouched
  db.put_evals({other});
  row.value = 0.75;
  db.put_evals({row}, /*keep_previous=*/true);
  rows = db.evals("mqar");
  REQUIRE(rows.size() == 3);
  CHECK(rows[2].value == 0.75);
  CHECK(nlohmann::json::parse(rows[2].details_json)["kept_previous"] == 1);
  db.put_evals({row});  // replaces both rows of the cell
  CHECK(db.evals("mqar").size() == 2);
}

TEST_CASE("a sweep's progress lines name the settings that set each cell apart", "[reliability]") {
  auto dir = temp_dir("sweep_describe");
  const std::string db = (dir / "r.sqlite").string(), cfg = (dir / "sweep.json").string();
  // Two cells of one model: the second's grid value is an object with a setting of its own (n_heads), which its
  // lines name; the keys every cell shares (n_layers, steps, ...) stay out of them.
  std::ofstream(cfg) << R"({"name": "described", "base": {"task": "mqar", "d_model": 16, "n_layers": 1,
      "n_heads": 2, "seq_len": 16, "vocab_size": 32, "num_kv_pairs": 2, "steps": 2, "n_train": 32, "n_test": 8,
      "batch_size": 8, "lr": 0.001}, "grid": {"model": ["transformer", {"model": "transformer", "n_heads": 4}]}})";
  auto r = run_mnemo("sweep --config " + cfg + " --db " + db + " --out " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("done   transformer mqar d_model=16 lr=0.001 n_heads=2 "));
  CHECK_THAT(r.output, Catch::Contains("done   transformer mqar d_model=16 lr=0.001 n_heads=4 "));
  CHECK_THAT(r.output, !Catch::Contains("n_layers="));
}
