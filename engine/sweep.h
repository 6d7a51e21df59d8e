// Sweeps: the cartesian grid over config keys, run as worker processes (`mnemo train`) that
// share one results database. Cells whose resolved config already has a completed run are
// skipped, so a sweep can be re-run to finish what is missing.
#pragma once
#include <string>
#include <vector>

#include "core/common.h"
#include "core/defaults.h"

namespace mnemo {

// Sweep file: {"name": "...", "base": {config}, "cases": [{partial config}, ...],
//              "grid": {"key": [values], ...}}. Cells = cases × product(grid), each merged over base.
std::vector<json> expand_sweep(const json& sweep);

struct SweepOptions {
  std::string db_path = kDefaultDbPath;
  std::string out_root;  // default out/runs/sweep-<name>
  std::string device;
  int jobs = 1;
  bool quiet = false;
};

struct SweepSummary {
  int total = 0, skipped = 0, completed = 0, failed = 0;
  std::vector<std::string> failures;  // "cell: message"
  double wall_s = 0;
};

SweepSummary run_sweep(const json& sweep, const SweepOptions& opt);

}  // namespace mnemo
