// Results database: SQLite through its C API, WAL journal, 60 s busy timeout, foreign keys on.
// Every multi-row write runs inside one transaction; values are always bound, never spliced
// into SQL text. Schema: README.md, "Results database".
#include "results/db.h"

#include <cmath>
#include <filesystem>
#include <limits>

namespace mnemo {

namespace {

constexpr int kSchemaVersion = 1;

const char* kSchemaSql = R"SQL(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at  TEXT NOT NULL,
  updated_at  TEXT NOT NULL,
  status      TEXT NOT NULL,  -- running | completed | failed | stopped (checked in code)
  model       TEXT NOT NULL,
  task        TEXT NOT NULL,
  config_json TEXT NOT NULL,
  config_hash TEXT NOT NULL,
  device      TEXT NOT NULL DEFAULT '',
  git_commit  TEXT NOT NULL DEFAULT '',
  host        TEXT NOT NULL DEFAULT '',
  out_dir     TEXT NOT NULL DEFAULT '',
  sweep       TEXT NOT NULL DEFAULT '',
  message     TEXT NOT NULL DEFAULT '',
  seed        INTEGER NOT NULL DEFAULT 0,
  n_params    INTEGER NOT NULL DEFAULT 0,
  last_step   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_hash ON runs (config_hash, status);
CREATE TABLE IF NOT EXISTS metrics (
  run_id    INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step      INTEGER NOT NULL,
  split     TEXT NOT NULL,
  name      TEXT NOT NULL,
  value     REAL,
  wall_time REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (run_id, step, split, name)
);
CREATE INDEX IF NOT EXISTS metrics_by_name ON metrics (split, name);
CREATE TABLE IF NOT EXISTS benches (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at    TEXT NOT NULL,
  model         TEXT NOT NULL,
  mode          TEXT NOT NULL,
  form          TEXT NOT NULL DEFAULT '',
  device        TEXT NOT NULL DEFAULT '',
  dtype         TEXT NOT NULL DEFAULT '',
  git_commit    TEXT NOT NULL DEFAULT '',
  host          TEXT NOT NULL DEFAULT '',
  torch_version TEXT NOT NULL DEFAULT '',
  blas          TEXT NOT NULL DEFAULT '',
  seq_len       INTEGER NOT NULL,
  batch         INTEGER NOT NULL,
  d_model       INTEGER NOT NULL,
  n_layers      INTEGER NOT NULL,
  threads       INTEGER NOT NULL,
  repeats       INTEGER NOT NULL,
  median_ms     REAL,
  p20_ms        REAL,
  p80_ms        REAL,
  tokens_per_s  REAL,
  peak_mem_mb   REAL,
  gflops        REAL,
  config_json   TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS evals (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id       INTEGER REFERENCES runs (id) ON DELETE SET NULL,
  created_at   TEXT NOT NULL,
  model        TEXT NOT NULL,
  task         TEXT NOT NULL,
  metric       TEXT NOT NULL,
  setting_json TEXT NOT NULL DEFAULT '{}',
  checkpoint   TEXT NOT NULL DEFAULT '',
  details_json TEXT NOT NULL DEFAULT '{}',
  value        REAL,
  n            INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS evals_by_task ON evals (task, model);
)SQL";

const char* kRunColumns =
    "id, created_at, updated_at, status, model, task, config_json, config_hash, device, "
    "git_commit, host, out_dir, sweep, message, seed, n_params, last_step";

const char* kBenchColumns =
    "id, created_at, model, mode, form, device, dtype, git_commit, host, torch_version, blas, "
    "seq_len, batch, d_model, n_layers, threads, repeats, median_ms, p20_ms, p80_ms, "
    "tokens_per_s, peak_mem_mb, gflops, config_json";

const char* kEvalColumns =
    "id, run_id, created_at, model, task, metric, setting_json, checkpoint, details_json, value, n";

std::string sqlite_message(sqlite3* db) { return db ? sqlite3_errmsg(db) : "out of memory"; }

// A prepared statement bound by position (1-based); errors name the database file.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      throw Error("results database " + path_ + ": cannot prepare statement (" +
                  sqlite_message(db) + "): " + sql);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  Statement& bind(int i, double v) {  // NaN is stored as NULL (read back as NaN)
    check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
    return *this;
  }
  Statement& bind_null(int i) {
    check(sqlite3_bind_null(stmt_, i));
    return *this;
  }

  // true while a row is available; throws on any error.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error("results database " + path_ + ": " + sqlite_message(db_));
  }
  void run() {
    while (step()) {
    }
  }
  // Re-arm a statement for the next row of a batch.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  std::string text(int c) const {
    const unsigned char* p = sqlite3_column_text(stmt_, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, c)))
             : std::string();
  }
  int64_t integer(int c) const { return sqlite3_column_int64(stmt_, c); }
  double real(int c) const {
    return sqlite3_column_type(stmt_, c) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                        : sqlite3_column_double(stmt_, c);
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK)
      throw Error("results database " + path_ + ": cannot bind parameter (" +
                  sqlite_message(db_) + ")");
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

RunInfo read_run(const Statement& s) {
  RunInfo r;
  r.id = s.integer(0);
  r.created_at = s.text(1);
  r.updated_at = s.text(2);
  r.status = s.text(3);
  r.model = s.text(4);
  r.task = s.text(5);
  r.config_json = s.text(6);
  r.config_hash = s.text(7);
  r.device = s.text(8);
  r.git_commit = s.text(9);
  r.host = s.text(10);
  r.out_dir = s.text(11);
  r.sweep = s.text(12);
  r.message = s.text(13);
  r.seed = s.integer(14);
  r.n_params = s.integer(15);
  r.last_step = s.integer(16);
  return r;
}

MetricRow read_metric(const Statement& s) {
  MetricRow m;
  m.run_id = s.integer(0);
  m.step = s.integer(1);
  m.split = s.text(2);
  m.name = s.text(3);
  m.value = s.real(4);
  m.wall_time = s.real(5);
  return m;
}

BenchRow read_bench(const Statement& s) {
  BenchRow b;
  b.id = s.integer(0);
  b.created_at = s.text(1);
  b.model = s.text(2);
  b.mode = s.text(3);
  b.form = s.text(4);
  b.device = s.text(5);
  b.dtype = s.text(6);
  b.git_commit = s.text(7);
  b.host = s.text(8);
  b.torch_version = s.text(9);
  b.blas = s.text(10);
  b.seq_len = s.integer(11);
  b.batch = s.integer(12);
  b.d_model = s.integer(13);
  b.n_layers = s.integer(14);
  b.threads = s.integer(15);
  b.repeats = s.integer(16);
  b.median_ms = s.real(17);
  b.p20_ms = s.real(18);
  b.p80_ms = s.real(19);
  b.tokens_per_s = s.real(20);
  b.peak_mem_mb = s.real(21);
  b.gflops = s.real(22);
  b.config_json = s.text(23);
  return b;
}

EvalRow read_eval(const Statement& s) {
  EvalRow e;
  e.id = s.integer(0);
  e.run_id = s.integer(1);  // NULL -> 0 (not tied to a run)
  e.created_at = s.text(2);
  e.model = s.text(3);
  e.task = s.text(4);
  e.metric = s.text(5);
  e.setting_json = s.text(6);
  e.checkpoint = s.text(7);
  e.details_json = s.text(8);
  e.value = s.real(9);
  e.n = s.integer(10);
  return e;
}

void require_status(const std::string& status, const std::string& path) {
  // stopped = paused by `train --stop-after`, resumable with --resume.
  if (status != "running" && status != "completed" && status != "failed" && status != "stopped")
    throw Error("results database " + path + ": run status '" + status +
                "' is not one of running, completed, failed, stopped");
}

}  // namespace

ResultsDB::ResultsDB(const std::string& path) : path_(path) {
  if (path.empty()) throw Error("results database: empty path");
  bool in_memory = path == ":memory:";
  if (!in_memory) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec)
      throw Error("results database " + path + ": cannot create directory " + parent.string() +
                  " (" + ec.message() + ")");
    if (std::filesystem::is_directory(path))
      throw Error("results database " + path + ": is a directory, not a file");
  }
  int rc = sqlite3_open_v2(path.c_str(), &db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = sqlite_message(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error("results database " + path + ": cannot open (" + msg + ")");
  }
  try {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 60000);
    // The first statement reads the header: a non-SQLite file fails here ("file is not a database").
    exec("PRAGMA foreign_keys = ON");
    if (!in_memory) exec("PRAGMA journal_mode = WAL");
    exec("PRAGMA synchronous = NORMAL");
    transaction([&] {
      exec(kSchemaSql);
      Statement get(db_, path_, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (get.step()) {
        std::string v = get.text(0);
        if (v != std::to_string(kSchemaVersion))
          throw Error("results database " + path_ + ": schema_version " + v +
                      " is not supported (this mnemo writes version " +
                      std::to_string(kSchemaVersion) + ")");
      } else {
        Statement put(db_, path_, "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)");
        put.bind(1, std::to_string(kSchemaVersion)).run();
      }
    });
  } catch (const Error&) {
    int code = sqlite3_errcode(db_) & 0xff;  // primary code (extended codes are on)
    std::string raw = sqlite_message(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
      throw Error("results database " + path + ": not a SQLite database or corrupted (" + raw + ")");
    throw;
  }
}

ResultsDB::~ResultsDB() {
  if (db_) sqlite3_close_v2(db_);
}

void ResultsDB::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite_message(db_);
    sqlite3_free(err);
    throw Error("results database " + path_ + ": " + msg);
  }
}

void ResultsDB::transaction(const std::function<void()>& fn) {
  // Nested calls (a writer inside a caller's transaction) become savepoints.
  bool outer = sqlite3_get_autocommit(db_) != 0;
  std::string savepoint = "mnemo_sp_" + std::to_string(++savepoint_depth_);
  try {
    exec(outer ? "BEGIN IMMEDIATE" : "SAVEPOINT " + savepoint);
  } catch (...) {
    --savepoint_depth_;
    throw;
  }
  try {
    fn();
    exec(outer ? "COMMIT" : "RELEASE " + savepoint);
  } catch (...) {
    --savepoint_depth_;
    if (outer) {
      if (sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    } else {
      std::string undo = "ROLLBACK TO " + savepoint + "; RELEASE " + savepoint;
      sqlite3_exec(db_, undo.c_str(), nullptr, nullptr, nullptr);
    }
    throw;
  }
  --savepoint_depth_;
}

int64_t ResultsDB::create_run(const RunInfo& r) {
  std::string status = r.status.empty() ? "running" : r.status;
  require_status(status, path_);
  int64_t id = 0;
  transaction([&] {
    Statement s(db_, path_,
                "INSERT INTO runs (created_at, updated_at, status, model, task, config_json, "
                "config_hash, device, git_commit, host, out_dir, sweep, message, seed, n_params, "
                "last_step) VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                "?14, ?15)");
    std::string now = r.created_at.empty() ? now_iso8601() : r.created_at;
    s.bind(1, now).bind(2, status).bind(3, r.model).bind(4, r.task);
    s.bind(5, r.config_json.empty() ? std::string("{}") : r.config_json).bind(6, r.config_hash);
    s.bind(7, r.device).bind(8, r.git_commit).bind(9, r.host).bind(10, r.out_dir);
    s.bind(11, r.sweep).bind(12, r.message).bind(13, r.seed).bind(14, r.n_params);
    s.bind(15, r.last_step).run();
    id = sqlite3_last_insert_rowid(db_);
  });
  return id;
}

void ResultsDB::set_run_status(int64_t run_id, const std::string& status,
                               const std::string& message) {
  require_status(status, path_);
  transaction([&] {
    Statement s(db_, path_,
                "UPDATE runs SET status = ?1, message = ?2, updated_at = ?3 WHERE id = ?4");
    s.bind(1, status).bind(2, message).bind(3, now_iso8601()).bind(4, run_id).run();
    if (sqlite3_changes(db_) == 0)
      throw Error("results database " + path_ + ": no run with id " + std::to_string(run_id));
  });
}

void ResultsDB::set_run_last_step(int64_t run_id, int64_t step) {
  transaction([&] {
    Statement s(db_, path_, "UPDATE runs SET last_step = ?1, updated_at = ?2 WHERE id = ?3");
    s.bind(1, step).bind(2, now_iso8601()).bind(3, run_id).run();
    if (sqlite3_changes(db_) == 0)
      throw Error("results database " + path_ + ": no run with id " + std::to_string(run_id));
  });
}

std::optional<RunInfo> ResultsDB::run(int64_t run_id) const {
  Statement s(db_, path_, (std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?1").c_str());
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return read_run(s);
}

std::vector<RunInfo> ResultsDB::runs() const {
  Statement s(db_, path_, (std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY id").c_str());
  std::vector<RunInfo> out;
  while (s.step()) out.push_back(read_run(s));
  return out;
}

std::optional<RunInfo> ResultsDB::completed_run_with_hash(const std::string& config_hash) const {
  Statement s(db_, path_,
              (std::string("SELECT ") + kRunColumns +
               " FROM runs WHERE config_hash = ?1 AND status = 'completed' ORDER BY id DESC LIMIT 1")
                  .c_str());
  s.bind(1, config_hash);
  if (!s.step()) return std::nullopt;
  return read_run(s);
}

void ResultsDB::add_metrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return;
  transaction([&] {
    Statement s(db_, path_,
                "INSERT OR REPLACE INTO metrics (run_id, step, split, name, value, wall_time) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (const MetricRow& m : rows) {
      if (m.split.empty() || m.name.empty())
        throw Error("results database " + path_ + ": metric row of run " +
                    std::to_string(m.run_id) + " at step " + std::to_string(m.step) +
                    " has an empty split or name");
      s.bind(1, m.run_id).bind(2, m.step).bind(3, m.split).bind(4, m.name);
      s.bind(5, m.value).bind(6, m.wall_time).run();
      s.reset();
    }
  });
}

void ResultsDB::delete_metrics_after(int64_t run_id, int64_t step) {
  transaction([&] {
    Statement s(db_, path_, "DELETE FROM metrics WHERE run_id = ?1 AND step > ?2");
    s.bind(1, run_id).bind(2, step).run();
  });
}

std::vector<MetricRow> ResultsDB::metrics(int64_t run_id) const {
  Statement s(db_, path_,
              "SELECT run_id, step, split, name, value, wall_time FROM metrics WHERE run_id = ?1 "
              "ORDER BY step, split, name");
  s.bind(1, run_id);
  std::vector<MetricRow> out;
  while (s.step()) out.push_back(read_metric(s));
  return out;
}

std::vector<MetricRow> ResultsDB::metrics_named(const std::string& split,
                                                const std::string& name) const {
  Statement s(db_, path_,
              "SELECT run_id, step, split, name, value, wall_time FROM metrics "
              "WHERE split = ?1 AND name = ?2 ORDER BY run_id, step");
  s.bind(1, split).bind(2, name);
  std::vector<MetricRow> out;
  while (s.step()) out.push_back(read_metric(s));
  return out;
}

int64_t ResultsDB::add_bench(const BenchRow& b) {
  int64_t id = 0;
  transaction([&] {
    Statement s(db_, path_,
                "INSERT INTO benches (created_at, model, mode, form, device, dtype, git_commit, "
                "host, torch_version, blas, seq_len, batch, d_model, n_layers, threads, repeats, "
                "median_ms, p20_ms, p80_ms, tokens_per_s, peak_mem_mb, gflops, config_json) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, "
                "?17, ?18, ?19, ?20, ?21, ?22, ?23)");
    s.bind(1, b.created_at.empty() ? now_iso8601() : b.created_at).bind(2, b.model);
    s.bind(3, b.mode).bind(4, b.form).bind(5, b.device).bind(6, b.dtype).bind(7, b.git_commit);
    s.bind(8, b.host).bind(9, b.torch_version).bind(10, b.blas).bind(11, b.seq_len);
    s.bind(12, b.batch).bind(13, b.d_model).bind(14, b.n_layers).bind(15, b.threads);
    s.bind(16, b.repeats).bind(17, b.median_ms).bind(18, b.p20_ms).bind(19, b.p80_ms);
    s.bind(20, b.tokens_per_s).bind(21, b.peak_mem_mb).bind(22, b.gflops);
    s.bind(23, b.config_json.empty() ? std::string("{}") : b.config_json).run();
    id = sqlite3_last_insert_rowid(db_);
  });
  return id;
}

std::vector<BenchRow> ResultsDB::benches() const {
  Statement s(db_, path_, (std::string("SELECT ") + kBenchColumns + " FROM benches ORDER BY id").c_str());
  std::vector<BenchRow> out;
  while (s.step()) out.push_back(read_bench(s));
  return out;
}

void ResultsDB::add_evals(const std::vector<EvalRow>& rows) {
  if (rows.empty()) return;
  transaction([&] {
    Statement s(db_, path_,
                "INSERT INTO evals (run_id, created_at, model, task, metric, setting_json, "
                "checkpoint, details_json, value, n) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    std::string now = now_iso8601();
    for (const EvalRow& e : rows) {
      if (e.task.empty() || e.metric.empty())
        throw Error("results database " + path_ + ": eval row of model '" + e.model +
                    "' has an empty task or metric");
      if (e.run_id > 0)
        s.bind(1, e.run_id);
      else
        s.bind_null(1);
      s.bind(2, e.created_at.empty() ? now : e.created_at).bind(3, e.model).bind(4, e.task);
      s.bind(5, e.metric).bind(6, e.setting_json.empty() ? std::string("{}") : e.setting_json);
      s.bind(7, e.checkpoint).bind(8, e.details_json.empty() ? std::string("{}") : e.details_json);
      s.bind(9, e.value).bind(10, e.n).run();
      s.reset();
    }
  });
}

std::vector<EvalRow> ResultsDB::evals(const std::string& task_prefix) const {
  // Prefix match without LIKE (whose wildcards '_' and '%' occur in task names).
  Statement s(db_, path_,
              (std::string("SELECT ") + kEvalColumns +
               " FROM evals WHERE substr(task, 1, length(?1)) = ?1 ORDER BY id")
                  .c_str());
  s.bind(1, task_prefix);
  std::vector<EvalRow> out;
  while (s.step()) out.push_back(read_eval(s));
  return out;
}

}  // namespace mnemo
