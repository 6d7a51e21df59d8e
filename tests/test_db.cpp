// Results database: round trips, transactions, idempotent resume, concurrent handles (WAL),
// corrupted files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "tests/file_util.h"
#include "tests/test_util.h"
#include "results/db.h"

using namespace mnemo;
namespace fs = std::filesystem;
using test::TempDir;

namespace {


RunInfo sample_run(const std::string& model, const std::string& hash) {
  RunInfo r;
  r.model = model;
  r.task = "mqar";
  r.config_json = R"({"model":")" + model + R"(","d_model":64,"lr":0.001})";
  r.config_hash = hash;
  r.device = "cpu";
  r.git_commit = "abc123";
  r.host = "testhost";
  r.seed = 7;
  r.n_params = 12345;
  return r;
}

}  // namespace

TEST_CASE("results db: runs, metrics, benches and evals round trip", "[db]") {
  TempDir dir("db_roundtrip");
  std::string path = dir.file("nested/dir/results.sqlite");  // parent dirs are created
  ResultsDB db(path);
  REQUIRE(fs::exists(path));
  CHECK(db.path() == path);

  int64_t a = db.create_run(sample_run("transformer", "h1"));
  int64_t b = db.create_run(sample_run("swa", "h2"));
  CHECK(b > a);
  auto ra = db.run(a);
  REQUIRE(ra);
  CHECK(ra->status == "running");
  CHECK(ra->model == "transformer");
  CHECK(ra->task == "mqar");
  CHECK(ra->config_hash == "h1");
  CHECK(ra->seed == 7);
  CHECK(ra->n_params == 12345);
  CHECK(ra->host == "testhost");
  CHECK(!ra->created_at.empty());
  CHECK_FALSE(db.run(9999));

  db.set_run_last_step(a, 40);
  db.set_run_status(a, "completed", "done");
  CHECK(db.run(a)->status == "completed");
  CHECK(db.run(a)->message == "done");
  CHECK(db.run(a)->last_step == 40);
  CHECK_THROWS_AS(db.set_run_status(a, "finished"), Error);
  CHECK_THROWS_AS(db.set_run_status(12345, "failed"), Error);
  REQUIRE(db.runs().size() == 2);
  CHECK(db.runs()[1].model == "swa");
  REQUIRE(db.completed_run_with_hash("h1"));
  CHECK(db.completed_run_with_hash("h1")->id == a);
  CHECK_FALSE(db.completed_run_with_hash("h2"));  // still running

  db.add_metrics({{a, 10, "train", "loss", 2.5, 1.0},
                  {a, 10, "test", "accuracy", 0.25, 1.1},
                  {a, 20, "test", "accuracy", 0.75, 2.0},
                  {b, 10, "test", "accuracy", 0.5, 1.0},
                  {b, 10, "eval:mqar", "accuracy", std::nan(""), 1.0}});
  auto ma = db.metrics(a);
  REQUIRE(ma.size() == 3);
  CHECK(ma[0].step == 10);
  auto acc = db.metrics_named("test", "accuracy");
  REQUIRE(acc.size() == 3);
  CHECK(acc[0].run_id == a);
  CHECK(acc[1].value == Approx(0.75));
  CHECK(acc[1].wall_time == Approx(2.0));
  auto nan_rows = db.metrics_named("eval:mqar", "accuracy");
  REQUIRE(nan_rows.size() == 1);
  CHECK(std::isnan(nan_rows[0].value));  // NaN survives as NULL

  db.delete_metrics_after(a, 10);
  CHECK(db.metrics(a).size() == 2);
  CHECK(db.metrics(b).size() == 2);

  BenchRow br;
  br.model = "transformer";
  br.mode = "fwd";
  br.device = "cpu";
  br.dtype = "float32";
  br.seq_len = 512;
  br.batch = 2;
  br.d_model = 64;
  br.n_layers = 2;
  br.threads = 1;
  br.repeats = 5;
  br.median_ms = 3.5;
  br.p20_ms = 3.0;
  br.p80_ms = 4.0;
  br.tokens_per_s = 2 * 512 / 0.0035;
  br.peak_mem_mb = 12.5;
  br.gflops = 1.25;
  br.config_json = R"({"state_bytes":1024})";
  int64_t bench_id = db.add_bench(br);
  auto benches = db.benches();
  REQUIRE(benches.size() == 1);
  CHECK(benches[0].id == bench_id);
  CHECK(benches[0].seq_len == 512);
  CHECK(benches[0].batch == 2);
  CHECK(benches[0].tokens_per_s == Approx(br.tokens_per_s));
  CHECK(benches[0].peak_mem_mb == Approx(12.5));
  CHECK(benches[0].config_json == br.config_json);
  CHECK(!benches[0].created_at.empty());

  EvalRow e1;
  e1.run_id = a;
  e1.model = "transformer";
  e1.task = "s_niah_1";
  e1.metric = "accuracy";
  e1.setting_json = R"({"length":2048,"depth":0.5})";
  e1.value = 98.5;
  e1.n = 200;
  EvalRow e2 = e1;
  e2.run_id = 0;  // not tied to a run
  e2.task = "babilong_qa1";
  db.add_evals({e1, e2});
  REQUIRE(db.evals().size() == 2);
  auto niah = db.evals("s_niah");
  REQUIRE(niah.size() == 1);
  CHECK(niah[0].run_id == a);
  CHECK(niah[0].value == Approx(98.5));
  CHECK(niah[0].n == 200);
  CHECK(niah[0].setting_json == e1.setting_json);
  CHECK(db.evals("babilong")[0].run_id == 0);
  CHECK(db.evals("s_niah_").size() == 1);  // '_' is not a wildcard
  CHECK(db.evals("s%").empty());

  // Reopening sees everything (and keeps schema_version 1).
  ResultsDB again(path);
  CHECK(again.runs().size() == 2);
  CHECK(again.benches().size() == 1);
  CHECK(again.evals().size() == 2);
}

TEST_CASE("results db: a failed transaction leaves nothing written", "[db]") {
  TempDir dir("db_rollback");
  ResultsDB db(dir.file("r.sqlite"));
  int64_t run = db.create_run(sample_run("transformer", "h"));

  // A row with an empty name fails mid-batch: the rows before it are rolled back too.
  CHECK_THROWS_AS(db.add_metrics({{run, 1, "train", "loss", 1.0, 0.0},
                                  {run, 2, "train", "loss", 0.9, 0.0},
                                  {run, 3, "train", "", 0.8, 0.0}}),
                  Error);
  CHECK(db.metrics(run).empty());

  // A foreign-key violation (unknown run) is a SQLite error naming the db file.
  try {
    db.add_metrics({{run, 1, "train", "loss", 1.0, 0.0}, {run + 100, 1, "train", "loss", 1.0, 0.0}});
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("r.sqlite") != std::string::npos);
    CHECK(std::string(e.what()).find("FOREIGN KEY") != std::string::npos);
  }
  CHECK(db.metrics(run).empty());

  // User code throwing inside transaction(): rolled back and rethrown unchanged.
  CHECK_THROWS_WITH(db.transaction([&] {
    db.add_metrics({{run, 5, "test", "accuracy", 0.5, 0.0}});  // nested: a savepoint
    db.create_run(sample_run("swa", "h2"));
    throw std::runtime_error("boom");
  }),
                    "boom");
  CHECK(db.metrics(run).empty());
  CHECK(db.runs().size() == 1);

  // A nested failure rolls back only its savepoint; the outer transaction commits.
  db.transaction([&] {
    db.add_metrics({{run, 1, "train", "loss", 1.0, 0.0}});
    CHECK_THROWS_AS(db.add_metrics({{run, 2, "train", "", 1.0, 0.0}}), Error);
  });
  CHECK(db.metrics(run).size() == 1);
  // The handle is still usable after all of that.
  db.add_metrics({{run, 2, "train", "loss", 0.5, 0.0}});
  CHECK(db.metrics(run).size() == 2);
}

TEST_CASE("results db: INSERT OR REPLACE makes a resumed run idempotent", "[db]") {
  TempDir dir("db_resume");
  ResultsDB db(dir.file("r.sqlite"));
  int64_t run = db.create_run(sample_run("transformer", "h"));
  std::vector<MetricRow> first;
  for (int64_t step = 1; step <= 6; ++step)
    first.push_back({run, step, "train", "loss", 1.0 / step, double(step)});
  db.add_metrics(first);

  // Crash after step 6, checkpoint at step 4: resume drops rows past 4, then re-logs 5..6
  // with new values; logging step 5 twice more changes nothing.
  db.delete_metrics_after(run, 4);
  REQUIRE(db.metrics(run).size() == 4);
  db.add_metrics({{run, 5, "train", "loss", 0.5, 5.0}, {run, 6, "train", "loss", 0.4, 6.0}});
  db.add_metrics({{run, 5, "train", "loss", 0.5, 5.0}});
  db.add_metrics({{run, 4, "train", "loss", 0.26, 4.0}});  // replace an existing key
  auto rows = db.metrics(run);
  REQUIRE(rows.size() == 6);
  CHECK(rows[3].value == Approx(0.26));
  CHECK(rows[4].value == Approx(0.5));
  CHECK(rows[5].value == Approx(0.4));
}

TEST_CASE("results db: two handles on one file both write (WAL)", "[db]") {
  TempDir dir("db_wal");
  std::string path = dir.file("shared.sqlite");
  ResultsDB first(path);
  ResultsDB second(path);
  {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(first.handle(), "PRAGMA journal_mode", -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "wal");
    sqlite3_finalize(st);
  }
  int64_t r1 = first.create_run(sample_run("transformer", "h1"));
  int64_t r2 = second.create_run(sample_run("swa", "h2"));
  CHECK(r1 != r2);
  first.add_metrics({{r2, 1, "train", "loss", 1.0, 0.0}});  // the other handle's run
  second.add_metrics({{r1, 1, "train", "loss", 2.0, 0.0}});
  // A reader transaction open on one handle does not block the other's writes (WAL).
  first.exec("BEGIN DEFERRED");
  CHECK(first.runs().size() == 2);  // holds a read snapshot
  second.add_metrics({{r1, 2, "train", "loss", 1.5, 0.0}});
  CHECK(first.metrics(r1).size() == 1);  // still the snapshot
  first.exec("COMMIT");
  CHECK(first.metrics(r1).size() == 2);
  CHECK(second.metrics(r2).size() == 1);
  CHECK(first.runs().size() == 2);
}

TEST_CASE("results db: a file that is not SQLite is an Error naming it", "[db]") {
  TempDir dir("db_corrupt");
  std::string path = dir.file("notes.sqlite");
  {
    std::ofstream f(path);
    f << "this is a text file, certainly not a SQLite database; " << std::string(4096, 'x');
  }
  try {
    ResultsDB db(path);
    FAIL("expected an Error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find("not a SQLite database") != std::string::npos);
  }
  CHECK_THROWS_AS(ResultsDB(dir.path.string()), Error);  // a directory
  CHECK_THROWS_AS(ResultsDB(""), Error);
}

TEST_CASE("results db: a newer schema version is refused", "[db]") {
  TempDir dir("db_schema");
  std::string path = dir.file("r.sqlite");
  {
    ResultsDB db(path);
    db.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  }
  CHECK_THROWS_WITH(ResultsDB(path), Catch::Contains("schema_version 99"));
}

TEST_CASE("db merge: a run merged while stopped is brought up to date when merged again", "[db][merge]") {
  TempDir dir("db_merge_refresh");
  const std::string shard = dir.file("shard.sqlite"), merged = dir.file("merged.sqlite");
  auto metric_rows = [](int64_t run, int64_t from_step, int64_t to_step) {
    std::vector<MetricRow> rows;
    for (int64_t s = from_step; s <= to_step; ++s) rows.push_back({run, s, "train", "loss", 1.0 / double(s), 0.0});
    return rows;
  };
  int64_t id = 0;
  {
    ResultsDB db(shard);
    id = db.create_run(sample_run("transformer", "h1"));
    db.add_metrics(metric_rows(id, 1, 10));
    db.set_run_last_step(id, 18);
    db.set_run_status(id, "stopped", "stopped by signal");
  }
  fs::copy_file(shard, dir.file("stopped_snapshot.sqlite"));
  MergeSummary first = merge_results_databases(merged, {shard});
  CHECK(first.runs_copied == 1);
  {
    ResultsDB db(shard);  // the run resumes and finishes
    db.set_run_status(id, "running");
    db.add_metrics(metric_rows(id, 11, 39));
    db.set_run_last_step(id, 30);
    db.set_run_status(id, "completed");
  }
  MergeSummary again = merge_results_databases(merged, {shard});
  CHECK(again.runs_copied == 0);
  CHECK(again.runs_updated == 1);
  auto check_up_to_date = [&] {
    ResultsDB out(merged, OpenMode::read_only);
    const auto runs = out.runs();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].status == "completed");
    CHECK(runs[0].last_step == 30);
    CHECK(out.metrics(runs[0].id).size() == 39);
  };
  check_up_to_date();
  // The same input again, or the older snapshot taken while stopped: nothing changes, nothing goes back.
  CHECK(merge_results_databases(merged, {shard}).runs_updated == 0);
  MergeSummary stale = merge_results_databases(merged, {dir.file("stopped_snapshot.sqlite")});
  CHECK(stale.runs_updated == 0);
  CHECK(stale.runs_copied == 0);
  check_up_to_date();
}

TEST_CASE("a SQLite file that is not mnemo's is refused for writing, and left as it was", "[db][foreign]") {
  TempDir dir("db_foreign");
  const std::string foreign = dir.file("app.sqlite");
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(foreign.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, "CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ada');", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  auto tables = [&] {
    sqlite3* raw = nullptr;
    sqlite3_open_v2(foreign.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(raw, "SELECT group_concat(name) FROM sqlite_master WHERE type = 'table'", -1, &st, nullptr);
    std::string names = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)
                            ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0)) : "";
    sqlite3_finalize(st);
    sqlite3_close(raw);
    return names;
  };
  CHECK_THROWS_WITH(ResultsDB(foreign), Catch::Contains(foreign) && Catch::Contains("not a mnemo results database") &&
                                            Catch::Contains("people"));
  CHECK(tables() == "people");
  // train's --db: one error line naming the file, nothing written into it
  auto r = test::run_mnemo("train --model transformer --task mqar --set d_model=16 --set n_layers=1 --set n_heads=2 "
                           "--set seq_len=16 --set num_kv_pairs=2 --set vocab_size=32 --set batch_size=4 --set "
                           "n_train=8 --set n_test=4 --set steps=1 --quiet --out " + dir.file("run") + " --db " + foreign);
  CAPTURE(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("mnemo: error: results database " + foreign + ": not a mnemo results database", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(tables() == "people");
  // an empty file, and a new one, are fine
  std::ofstream(dir.file("empty.sqlite")).close();
  CHECK_NOTHROW(ResultsDB(dir.file("empty.sqlite")));
}
