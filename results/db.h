// Results database (SQLite, WAL, busy timeout, every write in a transaction). The single source
// for reports. Schema documented in docs/results.md.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

struct RunInfo {
  int64_t id = 0;
  std::string created_at, updated_at, status;  // status: running | completed | failed
  std::string model, task, config_json, config_hash, device, git_commit, host, out_dir;
  std::string sweep, message;
  int64_t seed = 0, n_params = 0, last_step = 0;
};

// The process a run's row was last written by (column runs.pid, added on first use; host is
// runs.host). pid 0: not recorded (rows of an older mnemo).
struct RunProcess {
  int64_t pid = 0;
  std::string host;
};

// A message as stored in runs.message: its first non-empty line, trimmed, at most max_chars
// (never a stack trace or multi-line text).
std::string one_line_message(const std::string& text, size_t max_chars = 300);

struct MetricRow {
  int64_t run_id = 0, step = 0;
  std::string split, name;  // split: train | test | eval:<task> ...
  double value = 0, wall_time = 0;
};

struct BenchRow {
  int64_t id = 0;
  std::string created_at, model, mode, form, device, dtype, git_commit, host, torch_version, blas;
  int64_t seq_len = 0, batch = 0, d_model = 0, n_layers = 0, threads = 0, repeats = 0;
  double median_ms = 0, p20_ms = 0, p80_ms = 0, tokens_per_s = 0, peak_mem_mb = 0, gflops = 0;
  std::string config_json;
};

// A generic evaluation result (one row per task × metric × setting), e.g. S-NIAH accuracy at a
// (length, depth) cell. `setting` is a JSON object of the varying parameters.
struct EvalRow {
  int64_t id = 0, run_id = 0;  // run_id 0 if not tied to a training run
  std::string created_at, model, task, metric, setting_json, checkpoint, details_json;
  double value = 0;
  int64_t n = 0;
};

// A sweep cell's claim (table `leases`): one row per config hash, owned by one sweep process.
struct Lease {
  std::string config_hash, sweep, owner_host, acquired_at;
  int64_t owner_pid = 0;
  double heartbeat = 0;  // Unix seconds of the owner's last refresh
};

enum class LeaseClaim { claimed, held, completed };

enum class OpenMode {
  read_write,  // creates dirs, file and schema as needed
  read_only,   // SQLITE_OPEN_READONLY; refuses a file without mnemo's schema, never writes
};

class ResultsDB {
 public:
  explicit ResultsDB(const std::string& path, OpenMode mode = OpenMode::read_write);
  ~ResultsDB();
  ResultsDB(const ResultsDB&) = delete;
  ResultsDB& operator=(const ResultsDB&) = delete;

  const std::string& path() const { return path_; }

  bool read_only() const { return read_only_; }

  // The version of the config-hash rule the runs' hashes were made under (meta 'config_hash_version'; 1 when
  // absent: a database written before the rule had versions). engine/config/run_config.h rehash_runs_if_old uses it.
  int config_hash_version() const;
  // In one transaction: config_hash = hash_of(config_json) for every run where hash_of gives one; then records
  // `version` as config_hash_version.
  void rehash_runs(int version, const std::function<std::optional<std::string>(const std::string&)>& hash_of);

  int64_t create_run(const RunInfo& r);  // status 'running'
  void set_run_status(int64_t run_id, const std::string& status, const std::string& message = "");
  void set_run_last_step(int64_t run_id, int64_t step);
  // Records the process (pid, host) now running `run_id` (train; resume re-records it).
  void set_run_process(int64_t run_id, int64_t pid, const std::string& host);
  RunProcess run_process(int64_t run_id) const;
  // The status to show: 'crashed' for a 'running' row whose recorded process (this host) is gone; else as stored.
  // (`train --resume` adopts a crashed run.)
  std::string observed_status(const RunInfo& run) const;
  std::optional<RunInfo> run(int64_t run_id) const;
  std::vector<RunInfo> runs() const;
  // A completed run with this config hash (sweeps skip completed cells).
  std::optional<RunInfo> completed_run_with_hash(const std::string& config_hash) const;

  // All rows in one transaction (INSERT OR REPLACE on (run_id, step, split, name)).
  void add_metrics(const std::vector<MetricRow>& rows);
  void delete_metrics_after(int64_t run_id, int64_t step);  // resume: drop rows past checkpoint
  std::vector<MetricRow> metrics(int64_t run_id) const;
  std::vector<MetricRow> metrics_named(const std::string& split, const std::string& name) const;

  int64_t add_bench(const BenchRow& b);
  std::vector<BenchRow> benches() const;

  void add_evals(const std::vector<EvalRow>& rows);  // one transaction
  // One transaction: first deletes the earlier rows of each row's cell (same model, task, metric,
  // setting_json and run_id, or checkpoint when run_id is 0), then inserts. keep_previous keeps
  // them and marks the new rows' details_json with "kept_previous": <earlier rows of the cell>.
  void put_evals(const std::vector<EvalRow>& rows, bool keep_previous = false);

  // Sweep cell leases. claim_cell runs in one BEGIN IMMEDIATE transaction: `completed` if a
  // completed run has `config_hash`; `held` if another owner holds a live lease (its process still
  // exists when on this host, and its heartbeat is younger than stale_after_s); else the lease is
  // taken (or taken over) by (pid, host).
  LeaseClaim claim_cell(const std::string& config_hash, const std::string& sweep, int64_t pid,
                        const std::string& host, double stale_after_s = 300);
  bool refresh_lease(const std::string& config_hash, int64_t pid, const std::string& host);  // false: lost
  void release_lease(const std::string& config_hash, int64_t pid, const std::string& host);
  std::optional<Lease> lease(const std::string& config_hash) const;
  // For tests: writes a lease row as is.
  void put_lease(const Lease& l);
  std::vector<EvalRow> evals(const std::string& task_prefix = "") const;

  // Run `fn` inside BEGIN IMMEDIATE ... COMMIT; ROLLBACK if it throws (and rethrow).
  void transaction(const std::function<void()>& fn);
  void exec(const std::string& sql);  // throws Error with the SQLite message
  sqlite3* handle() { return db_; }

 private:
  void check_schema_read_only();
  std::string path_;
  sqlite3* db_ = nullptr;
  bool read_only_ = false;
  int savepoint_depth_ = 0;  // nested transaction() calls use SAVEPOINTs
};

// `mnemo db merge OUT IN...` (results/db_merge.cpp): the inputs' runs (with their metrics), evaluations and benches
// appended to OUT (created if missing) with run ids renumbered in OUT's sequence. A completed run whose config hash
// already has a completed run in OUT is not copied (a cell is never duplicated). A row merged before is not copied
// again; where the input's row has moved on since (updated later: the run went on after the earlier merge) its
// status, step and metrics replace OUT's copy (runs_updated). Every input must have this schema version. Written
// into a copy that replaces OUT only when all inputs are in.
struct MergeSummary {
  int64_t inputs = 0, runs_copied = 0, runs_updated = 0, runs_skipped = 0, evals_copied = 0, benches_copied = 0;
};
MergeSummary merge_results_databases(const std::string& out_path, const std::vector<std::string>& inputs);

}  // namespace mnemo
