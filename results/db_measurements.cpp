// Results database, the measurement tables: `benches` (one row per `mnemo bench` measurement) and `evals`
// (evaluation results appended as they come; results/db_cells.cpp has the writes that replace a cell).
#include "core/common.h"
#include "results/db.h"
#include "results/statement.h"

namespace mnemo {

namespace {

using detail::Statement;

const char* kBenchColumns =
    "id, created_at, model, mode, form, device, dtype, git_commit, host, torch_version, blas, "
    "seq_len, batch, d_model, n_layers, threads, repeats, median_ms, p20_ms, p80_ms, "
    "tokens_per_s, peak_mem_mb, gflops, config_json";

const char* kEvalColumns =
    "id, run_id, created_at, model, task, metric, setting_json, checkpoint, details_json, value, n";

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

}  // namespace

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
