// `mnemo sweep --config SWEEP.json [--db FILE] [--jobs N] [--out DIR] [--device D]`
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "engine/sweep.h"

namespace mnemo::cli {

void add_sweep_command(CLI::App& app) {
  static std::string config, db = kDefaultDbPath, out, device;
  static int jobs = 1;
  auto* sub = app.add_subcommand("sweep",
                                 "Run a grid of training runs (cases × grid over config keys) with N worker "
                                 "processes; completed cells are skipped on re-run");
  sub->add_option("--config", config, "Sweep file: {name, base, cases, grid}")->required();
  sub->add_option("--db", db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--jobs", jobs, "Worker processes")->check(CLI::PositiveNumber);
  sub->add_option("--out", out, "Root folder of the runs (default out/runs/sweep-<name>)");
  sub->add_option("--device", device, "cpu | cuda | auto");
  sub->callback([] {
    SweepOptions opt;
    opt.db_path = db;
    opt.jobs = jobs;
    opt.out_root = out;
    opt.device = device;
    auto sum = run_sweep(read_json_file(config), opt);
    if (sum.failed > 0) {
      std::string msg = std::to_string(sum.failed) + " sweep cell(s) failed:";
      for (const auto& f : sum.failures) msg += "\n  " + f;
      throw Error(msg);
    }
  });
}

}  // namespace mnemo::cli
