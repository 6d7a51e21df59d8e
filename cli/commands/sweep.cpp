// `mnemo sweep --config SWEEP.json [--db FILE] [--jobs N] [--out DIR] [--device D] [--shard i/N]`
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "engine/tools/sweep.h"

namespace mnemo::cli {

void add_sweep_command(CLI::App& app) {
  static std::string config, db = kDefaultDbPath, out, device, shard;
  static double progress_every = 30;
  static int jobs = 1;
  auto* sub = app.add_subcommand("sweep",
                                 "Run a grid of training runs (cases × grid over config keys) with N worker "
                                 "processes; completed cells are skipped on re-run, several sweeps on one DB share "
                                 "the cells (each runs once); SIGINT/SIGTERM stop the workers (resumable)");
  sub->add_option("--config", config, "Sweep file: {name, base, cases, grid}")->required();
  sub->add_option("--db", db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--jobs", jobs, "Worker processes")->check(CLI::PositiveNumber);
  sub->add_option("--out", out, "Root folder of the runs (default out/runs/sweep-<name>)");
  sub->add_option("--device", device, "cpu | cuda | auto");
  sub->add_option("--shard", shard,
                  "Run only shard i of N (0 <= i < N: the cells i, i+N, i+2N, ... of the grid), e.g. one per Slurm "
                  "array task into its own --db; `mnemo db merge` joins the databases");
  sub->add_option("--progress-every", progress_every,
                  "When stdout is not a terminal: print each running cell's progress and the sweep's every S "
                  "seconds (default 30; 0: never). On a terminal it is redrawn in place every second")
      ->check(CLI::NonNegativeNumber);
  sub->callback([] {
    SweepOptions opt;
    opt.db_path = db;
    opt.jobs = jobs;
    opt.progress_every_s = progress_every;
    opt.out_root = out;
    opt.device = device;
    if (!shard.empty()) std::tie(opt.shard_index, opt.shard_count) = parse_shard(shard);
    auto sum = run_sweep(read_json_file(config), opt);
    if (sum.stop_signal != 0) {  // SIGINT/SIGTERM: forwarded to the workers, which were waited for
      const char* sig = sum.stop_signal == SIGINT ? "SIGINT" : sum.stop_signal == SIGTERM ? "SIGTERM" : "a signal";
      std::cerr << "mnemo: sweep stopped by " << sig << "; re-run the same command to resume\n";
      std::cout.flush();
      std::exit(128 + sum.stop_signal);
    }
    if (sum.failed > 0) {
      std::string msg = std::to_string(sum.failed) + " sweep cell(s) failed:";
      for (const auto& f : sum.failures) msg += "\n  " + f;
      throw Error(msg);
    }
  });
}

}  // namespace mnemo::cli
