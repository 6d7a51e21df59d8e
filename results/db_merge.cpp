// `mnemo db merge`: the results databases of a sharded sweep (one SQLite file per shard) into one (results/db.h).
#include <unistd.h>

#include <filesystem>

#include "results/db.h"
#include "results/statement.h"

namespace mnemo {

using detail::Statement;

namespace {

// SQL literal of a file name for ATTACH (single quotes doubled).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

int64_t count(sqlite3* db, const std::string& path, const char* sql) {
  Statement st(db, path, sql);
  return st.step() ? st.integer(0) : 0;
}

}  // namespace

namespace {

MergeSummary merge_into(ResultsDB& out, const std::vector<std::string>& inputs) {
  sqlite3* db = out.handle();
  MergeSummary sum;
  for (const auto& in : inputs) {
    out.exec("ATTACH DATABASE " + quoted(in) + " AS src");
    try {
      out.transaction([&] {
        out.exec("CREATE TEMP TABLE IF NOT EXISTS run_map (old_id INTEGER PRIMARY KEY, new_id INTEGER)");
        out.exec("DELETE FROM temp.run_map");
        // A run already here (the same row merged before: hash, creation time, host, folder) maps to it; a completed
        // run whose cell (config hash) is completed here maps to that run and is not copied.
        out.exec(
            "INSERT INTO temp.run_map (old_id, new_id) SELECT s.id, (SELECT m.id FROM main.runs m WHERE "
            "m.config_hash = s.config_hash AND m.created_at = s.created_at AND m.host = s.host AND m.out_dir = "
            "s.out_dir ORDER BY m.id LIMIT 1) FROM src.runs s");
        out.exec(
            "UPDATE temp.run_map SET new_id = (SELECT m.id FROM main.runs m JOIN src.runs s ON s.id = "
            "temp.run_map.old_id WHERE m.config_hash = s.config_hash AND m.status = 'completed' AND s.status = "
            "'completed' ORDER BY m.id LIMIT 1) WHERE new_id IS NULL AND EXISTS (SELECT 1 FROM main.runs m JOIN "
            "src.runs s ON s.id = temp.run_map.old_id WHERE m.config_hash = s.config_hash AND m.status = "
            "'completed' AND s.status = 'completed')");
        // A run merged before whose source row has moved on since (a shard merged while the run was running or
        // stopped, then resumed and finished) is brought up to date: its row and its metrics replaced by the
        // source's, in this transaction. "Moved on": written later (updated_at, ISO 8601 UTC, compares as text),
        // or at the same second further along (last_step) or with more metric rows. An older source row is stale
        // and leaves this database's copy as it is.
        Statement newer(db, out.path(),
                        "SELECT r.old_id, r.new_id FROM temp.run_map r JOIN src.runs s ON s.id = r.old_id JOIN main.runs "
                        "m ON m.id = r.new_id WHERE m.config_hash = s.config_hash AND m.created_at = s.created_at AND "
                        "m.host = s.host AND m.out_dir = s.out_dir AND (s.updated_at > m.updated_at OR (s.updated_at = "
                        "m.updated_at AND (s.last_step > m.last_step OR (SELECT COUNT(*) FROM src.metrics x WHERE "
                        "x.run_id = s.id) > (SELECT COUNT(*) FROM main.metrics y WHERE y.run_id = m.id)))) ORDER BY "
                        "r.old_id");
        std::vector<std::pair<int64_t, int64_t>> refresh;
        while (newer.step()) refresh.emplace_back(newer.integer(0), newer.integer(1));
        for (const auto& [old_id, new_id] : refresh) {
          Statement upd(db, out.path(),
                        "UPDATE main.runs SET (updated_at, status, model, task, config_json, device, git_commit, "
                        "sweep, message, seed, n_params, last_step) = (SELECT updated_at, status, model, task, "
                        "config_json, device, git_commit, sweep, message, seed, n_params, last_step FROM src.runs "
                        "WHERE id = ?1) WHERE id = ?2");
          upd.bind(1, old_id).bind(2, new_id).run();
          Statement drop(db, out.path(), "DELETE FROM main.metrics WHERE run_id = ?1");
          drop.bind(1, new_id).run();
          Statement metrics(db, out.path(),
                            "INSERT INTO main.metrics (run_id, step, split, name, value, wall_time) SELECT ?1, step, "
                            "split, name, value, wall_time FROM src.metrics WHERE run_id = ?2");
          metrics.bind(1, new_id).bind(2, old_id).run();
          ++sum.runs_updated;
        }
        sum.runs_skipped += count(db, out.path(), "SELECT COUNT(*) FROM temp.run_map WHERE new_id IS NOT NULL") -
                            static_cast<int64_t>(refresh.size());
        // The rest are copied in id order: new ids continue this database's sequence.
        Statement pending(db, out.path(), "SELECT old_id FROM temp.run_map WHERE new_id IS NULL ORDER BY old_id");
        std::vector<int64_t> copy;
        while (pending.step()) copy.push_back(pending.integer(0));
        for (int64_t old_id : copy) {
          Statement ins(db, out.path(),
                        "INSERT INTO main.runs (created_at, updated_at, status, model, task, config_json, config_hash, "
                        "device, git_commit, host, out_dir, sweep, message, seed, n_params, last_step) SELECT "
                        "created_at, updated_at, status, model, task, config_json, config_hash, device, git_commit, "
                        "host, out_dir, sweep, message, seed, n_params, last_step FROM src.runs WHERE id = ?1");
          ins.bind(1, old_id).run();
          const int64_t new_id = sqlite3_last_insert_rowid(db);
          Statement map(db, out.path(), "UPDATE temp.run_map SET new_id = ?1 WHERE old_id = ?2");
          map.bind(1, new_id).bind(2, old_id).run();
          Statement metrics(db, out.path(),
                            "INSERT OR IGNORE INTO main.metrics (run_id, step, split, name, value, wall_time) SELECT "
                            "?1, step, split, name, value, wall_time FROM src.metrics WHERE run_id = ?2");
          metrics.bind(1, new_id).bind(2, old_id).run();
          ++sum.runs_copied;
        }
        // Evaluations follow their run (or keep none); one already here (same cell, time and value) is not copied.
        const int64_t evals_before = count(db, out.path(), "SELECT COUNT(*) FROM main.evals");
        out.exec(
            "INSERT INTO main.evals (run_id, created_at, model, task, metric, setting_json, checkpoint, details_json, "
            "value, n) SELECT (SELECT new_id FROM temp.run_map WHERE old_id = e.run_id), e.created_at, e.model, "
            "e.task, e.metric, e.setting_json, e.checkpoint, e.details_json, e.value, e.n FROM src.evals e WHERE NOT "
            "EXISTS (SELECT 1 FROM main.evals x WHERE x.created_at = e.created_at AND x.model = e.model AND x.task = "
            "e.task AND x.metric = e.metric AND x.setting_json = e.setting_json AND x.checkpoint = e.checkpoint AND "
            "x.value IS e.value) ORDER BY e.id");
        sum.evals_copied += count(db, out.path(), "SELECT COUNT(*) FROM main.evals") - evals_before;
        const int64_t benches_before = count(db, out.path(), "SELECT COUNT(*) FROM main.benches");
        out.exec(
            "INSERT INTO main.benches (created_at, model, mode, form, device, dtype, git_commit, host, torch_version, "
            "blas, seq_len, batch, d_model, n_layers, threads, repeats, median_ms, p20_ms, p80_ms, tokens_per_s, "
            "peak_mem_mb, gflops, config_json) SELECT created_at, model, mode, form, device, dtype, git_commit, host, "
            "torch_version, blas, seq_len, batch, d_model, n_layers, threads, repeats, median_ms, p20_ms, p80_ms, "
            "tokens_per_s, peak_mem_mb, gflops, config_json FROM src.benches b WHERE NOT EXISTS (SELECT 1 FROM "
            "main.benches x WHERE x.created_at = b.created_at AND x.model = b.model AND x.mode = b.mode AND x.form = "
            "b.form AND x.seq_len = b.seq_len AND x.host = b.host AND x.config_json = b.config_json) ORDER BY b.id");
        sum.benches_copied += count(db, out.path(), "SELECT COUNT(*) FROM main.benches") - benches_before;
      });
    } catch (...) {
      try {
        out.exec("DETACH DATABASE src");
      } catch (...) {
      }
      throw;
    }
    out.exec("DETACH DATABASE src");
    ++sum.inputs;
  }
  return sum;
}

}  // namespace

MergeSummary merge_results_databases(const std::string& out_path, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (inputs.empty()) throw Error("db merge: give at least one input database");
  std::error_code ec;
  for (const auto& in : inputs) {
    if (fs::exists(out_path) && fs::equivalent(out_path, in, ec))
      throw Error("db merge: the output " + out_path + " is also an input");
    ResultsDB check(in, OpenMode::read_only);  // a missing file or another schema version -> Error naming it
  }
  if (fs::exists(out_path)) ResultsDB check(out_path, OpenMode::read_only);
  // Write-then-rename: the merge goes into a copy, which replaces the output only when every input is in.
  const std::string tmp = out_path + ".merging-" + std::to_string(static_cast<long long>(::getpid()));
  fs::remove(tmp, ec);
  MergeSummary sum;
  try {
    if (fs::exists(out_path)) {
      ResultsDB existing(out_path);
      existing.exec("VACUUM INTO " + quoted(tmp));
    }
    {
      ResultsDB out(tmp);
      sum = merge_into(out, inputs);
      out.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    }
    for (const char* side : {"-wal", "-shm"}) fs::remove(tmp + side, ec);
    fs::rename(tmp, out_path);
  } catch (...) {
    for (const char* side : {"", "-wal", "-shm"}) fs::remove(tmp + side, ec);
    throw;
  }
  return sum;
}

}  // namespace mnemo
