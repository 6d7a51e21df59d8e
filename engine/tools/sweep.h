// Sweeps: the cartesian grid over config keys, run as worker processes (`mnemo train`) that
// share one results database (and may be shared by several sweep processes). Cells whose resolved config already has a completed run are
// skipped, so a sweep can be re-run to finish what is missing.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/defaults.h"

namespace mnemo {

// Sweep file: {"name": "...", "base": {config}, "cases": [{partial config}, ...],
//              "grid": {"key": [values], ...}}. Cells = cases × product(grid), each merged over base. A grid
// value that is an object sets its key together with other keys (it must set the axis's own key), e.g. a model
// with its own settings: "model": ["gated_deltanet", {"model": "mamba3", "mamba_mimo_rank": 4}].
// More than kMaxSweepCells cells is an error (a grid's product grows fast).
constexpr int64_t kMaxSweepCells = 100000;
std::vector<json> expand_sweep(const json& sweep);

struct SweepOptions {
  std::string db_path = kDefaultDbPath;
  std::string out_root;  // default out/runs/sweep-<name>
  std::string device;
  int jobs = 1;
  bool quiet = false;  // no waiting notes and no progress lines
  // Progress of the running cells and of the sweep: redrawn in place every second when live (-1: when stdout is
  // a terminal), else printed as plain lines every progress_every_s seconds (0: never).
  int live_progress = -1;
  double progress_every_s = 30;
  // Many machines: this process runs shard `shard_index` (0-based) of `shard_count` disjoint shards of the grid —
  // the cells whose index in the expanded grid is shard_index mod shard_count — each shard into its own database
  // (`mnemo db merge` joins them).
  int shard_index = 0, shard_count = 1;
};

// "i/N" -> (i, N) with 0 <= i < N; anything else -> Error naming the value.
std::pair<int, int> parse_shard(const std::string& text);

struct SweepSummary {
  int total = 0, skipped = 0, completed = 0, failed = 0, stopped = 0;
  int stop_signal = 0;  // SIGINT/SIGTERM that stopped the sweep (forwarded to its workers), 0 if none
  std::vector<std::string> failures;  // "cell: message"
  double wall_s = 0;
};

// Each cell is claimed in the results DB (a lease per config hash, refreshed while its worker runs;
// a lease whose owner is gone or silent for 5 minutes is taken over), so several sweep processes
// on one DB run every cell once; a cell's folder (<out_root>/<model>-<config hash>) is locked
// (flock on .lock) by the sweep and its worker. SIGINT/SIGTERM are forwarded to the workers, which
// are waited for; the summary's stop_signal says so (the CLI exits 128 + signal).
SweepSummary run_sweep(const json& sweep, const SweepOptions& opt);

}  // namespace mnemo
