// Results database: SQLite through its C API, WAL journal, 60 s busy timeout, foreign keys on.
// Every multi-row write runs inside one transaction; values are always bound, never spliced
// into SQL text. Schema: docs/results.md.
#include "results/db.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include "results/statement.h"
#include "core/process.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>

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
CREATE TABLE IF NOT EXISTS leases (
  config_hash TEXT PRIMARY KEY,
  sweep       TEXT NOT NULL DEFAULT '',
  owner_pid   INTEGER NOT NULL,
  owner_host  TEXT NOT NULL,
  acquired_at TEXT NOT NULL,
  heartbeat   REAL NOT NULL
);
)SQL";

const char* kRunColumns =
    "id, created_at, updated_at, status, model, task, config_json, config_hash, device, "
    "git_commit, host, out_dir, sweep, message, seed, n_params, last_step";

using detail::sqlite_message;
using detail::Statement;

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

void require_status(const std::string& status, const std::string& path) {
  // stopped = paused by `train --stop-after`, resumable with --resume.
  if (status != "running" && status != "completed" && status != "failed" && status != "stopped")
    throw Error("results database " + path + ": run status '" + status +
                "' is not one of running, completed, failed, stopped");
}

}  // namespace

ResultsDB::ResultsDB(const std::string& path, OpenMode mode)
    : path_(path), read_only_(mode == OpenMode::read_only) {
  if (path.empty()) throw Error("results database: empty path");
  bool in_memory = path == ":memory:";
  if (!in_memory && read_only_) {
    if (!std::filesystem::exists(path)) throw Error("results database " + path + " does not exist");
    if (!std::filesystem::is_regular_file(path)) throw Error("results database " + path + " is not a file");
  } else if (!in_memory) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec)
      throw Error("results database " + path + ": cannot create directory " + parent.string() +
                  " (" + ec.message() + ")");
    if (std::filesystem::is_directory(path))
      throw Error("results database " + path + ": is a directory, not a file");
  }
  auto open = [&](const std::string& name, int flags) {
    int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = sqlite_message(db_);
      sqlite3_close(db_);
      db_ = nullptr;
      throw Error("results database " + path + ": cannot open (" + msg + ")");
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 60000);
  };
  // Closes the connection and rethrows the current exception, naming a non-database file.
  auto fail = [&]() {
    int code = sqlite3_errcode(db_) & 0xff;  // primary code (extended codes are on)
    std::string raw = sqlite_message(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
      throw Error("results database " + path + ": not a SQLite database or corrupted (" + raw + ")");
    throw;
  };
  if (read_only_) {
    open(path, SQLITE_OPEN_READONLY);
    int code = SQLITE_OK;
    try {
      check_schema_read_only();
      return;
    } catch (const Error&) {
      code = sqlite3_errcode(db_) & 0xff;
      if (code != SQLITE_CANTOPEN && code != SQLITE_READONLY && code != SQLITE_IOERR) fail();
    }
    // A WAL database whose -shm cannot be made (read-only file or folder): read the file as it is.
    sqlite3_close(db_);
    db_ = nullptr;
    std::string uri = "file:";
    for (char c : path) {
      if (c == '?' || c == '#' || c == '%') {
        char buf[4];
        std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
        uri += buf;
      } else {
        uri += c;
      }
    }
    open(uri + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    try {
      check_schema_read_only();
    } catch (const Error&) {
      fail();
    }
    return;
  }
  open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  try {
    // The first statement reads the header: a non-SQLite file fails here ("file is not a database").
    exec("PRAGMA foreign_keys = ON");
    // Switching a new file to WAL can report SQLITE_BUSY at once (without the busy handler) while another
    // process is opening the same file: retry for up to the busy timeout.
    for (int attempt = 0; !in_memory; ++attempt) {
      try {
        exec("PRAGMA journal_mode = WAL");
        break;
      } catch (const Error&) {
        const int code = sqlite3_errcode(db_) & 0xff;
        if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || attempt >= 600) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    exec("PRAGMA synchronous = NORMAL");
    transaction([&] {
      // A file that already holds tables but not mnemo's (no schema_version in 'meta') is someone else's
      // database: refused, never given mnemo's tables (checked inside the transaction, so a second process
      // creating the same new file sees the first one's schema).
      std::vector<std::string> tables;
      bool has_version = false;
      {
        Statement t(db_, path_, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                                "ORDER BY name");
        while (t.step()) tables.push_back(t.text(0));
      }
      if (std::find(tables.begin(), tables.end(), "meta") != tables.end()) {
        Statement v(db_, path_, "SELECT 1 FROM meta WHERE key = 'schema_version'");
        has_version = v.step();
      }
      if (!tables.empty() && !has_version) {
        std::string names;
        for (size_t i = 0; i < tables.size() && i < 4; ++i) names += (i ? ", " : "") + text_excerpt(tables[i], 40);
        if (tables.size() > 4) names += ", ...";
        throw Error("results database " + path_ + ": not a mnemo results database (it holds table(s) " + names +
                    " and no schema_version in 'meta'); give --db a new file or one mnemo wrote");
      }
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
    fail();
  }
}

int ResultsDB::config_hash_version() const {
  Statement get(db_, path_, "SELECT value FROM meta WHERE key = 'config_hash_version'");
  if (!get.step()) return 1;
  const std::string v = get.text(0);
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    throw Error("results database " + path_ + ": meta 'config_hash_version' is not a number: '" +
                text_excerpt(v, 40) + "'");
  }
}

void ResultsDB::rehash_runs(int version,
                            const std::function<std::optional<std::string>(const std::string&)>& hash_of) {
  transaction([&] {
    std::vector<std::pair<int64_t, std::string>> updates;
    {
      Statement all(db_, path_, "SELECT id, config_json FROM runs ORDER BY id");
      while (all.step())
        if (auto h = hash_of(all.text(1))) updates.emplace_back(all.integer(0), *h);
    }
    for (const auto& [id, hash] : updates) {
      Statement put(db_, path_, "UPDATE runs SET config_hash = ?1 WHERE id = ?2");
      put.bind(1, hash).bind(2, id).run();
    }
    Statement put(db_, path_, "INSERT OR REPLACE INTO meta (key, value) VALUES ('config_hash_version', ?1)");
    put.bind(1, std::to_string(version)).run();
  });
}

// Read-only opening: the file must already hold mnemo's schema (never created here).
void ResultsDB::check_schema_read_only() {
  // The first statement reads the header: a non-SQLite file fails here.
  Statement t(db_, path_, "SELECT name FROM sqlite_master WHERE type = 'table'");
  std::set<std::string> tables;
  while (t.step()) tables.insert(t.text(0));
  for (const char* need : {"meta", "runs", "metrics", "benches", "evals"})
    if (!tables.count(need))
      throw Error("results database " + path_ + ": not a mnemo results database (no '" + need +
                  "' table; pass the --db that mnemo train, sweep or bench wrote)");
  Statement get(db_, path_, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (!get.step())
    throw Error("results database " + path_ + ": not a mnemo results database (no schema_version in 'meta')");
  const std::string v = get.text(0);
  if (v != std::to_string(kSchemaVersion))
    throw Error("results database " + path_ + ": schema_version " + v +
                " is not supported (this mnemo reads version " + std::to_string(kSchemaVersion) + ")");
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
    s.bind(1, status).bind(2, one_line_message(message)).bind(3, now_iso8601()).bind(4, run_id).run();
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

std::string one_line_message(const std::string& text, size_t max_chars) {
  const char* ws = " \t\r\n\f\v";
  size_t pos = 0;
  std::string line;
  while (pos <= text.size()) {  // first non-empty line
    size_t end = text.find_first_of("\r\n", pos);
    if (end == std::string::npos) end = text.size();
    line = text.substr(pos, end - pos);
    size_t b = line.find_first_not_of(ws);
    if (b != std::string::npos) {
      line = line.substr(b, line.find_last_not_of(ws) - b + 1);
      break;
    }
    line.clear();
    pos = end + 1;
  }
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';  // tabs and other control characters
  if (line.size() > max_chars) {
    size_t cut = max_chars > 3 ? max_chars - 3 : 0;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
    line = line.substr(0, cut) + "...";
  }
  return line;
}

namespace {
bool runs_has_pid_column(sqlite3* db, const std::string& path) {
  Statement s(db, path, "SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'pid'");
  return s.step() && s.integer(0) > 0;
}
}  // namespace

void ResultsDB::set_run_process(int64_t run_id, int64_t pid, const std::string& host) {
  transaction([&] {
    if (!runs_has_pid_column(db_, path_)) exec("ALTER TABLE runs ADD COLUMN pid INTEGER NOT NULL DEFAULT 0");
    Statement s(db_, path_, "UPDATE runs SET pid = ?1, host = ?2, updated_at = ?3 WHERE id = ?4");
    s.bind(1, pid).bind(2, host).bind(3, now_iso8601()).bind(4, run_id).run();
    if (sqlite3_changes(db_) == 0)
      throw Error("results database " + path_ + ": no run with id " + std::to_string(run_id));
  });
}

RunProcess ResultsDB::run_process(int64_t run_id) const {
  RunProcess p;
  const bool has_pid = runs_has_pid_column(db_, path_);
  Statement s(db_, path_, has_pid ? "SELECT pid, host FROM runs WHERE id = ?1" : "SELECT 0, host FROM runs WHERE id = ?1");
  s.bind(1, run_id);
  if (s.step()) {
    p.pid = s.integer(0);
    p.host = s.text(1);
  }
  return p;
}

std::string ResultsDB::observed_status(const RunInfo& run) const {
  if (run.status != "running") return run.status;
  const RunProcess p = run_process(run.id);
  if (p.pid > 0 && p.host == hostname() && !process_alive(p.pid)) return "crashed";
  return run.status;
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

}  // namespace mnemo
