// `mnemo train --config FILE.json [--set key=value]... [--db FILE] [--out DIR] [--device D] [--resume]
//  [--nproc N] [--dist-timeout S]`: one rank of a data-parallel job when torchrun's or Slurm's variables say so.
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/commands/launch.h"
#include "core/defaults.h"
#include "core/signals.h"
#include "engine/config/run_config.h"
#include "engine/training/trainer.h"

namespace mnemo::cli {

namespace {
struct TrainArgs {
  std::string config, db = kDefaultDbPath, out, device, model, task, sweep;
  std::vector<std::string> sets;
  bool resume = false, quiet = false;
  int64_t stop_after = 0;
  int nproc = 0;
  double dist_timeout_s = 1800;
  double dist_bucket_mb = 25;
  bool no_dist_overlap = false;
};

std::string train_footer() {
  std::string s = "\nConfig keys (the task's and the mixer's parameters are keys too: `mnemo tasks`, `mnemo models`):\n";
  for (auto it = config_key_help().begin(); it != config_key_help().end(); ++it) {
    json def = training_defaults().contains(it.key()) ? training_defaults()[it.key()] : skeleton_defaults()[it.key()];
    s += "  " + it.key() + " (default " + def.dump() + "): " + it.value().get<std::string>() + "\n";
  }
  return s;
}
}  // namespace

void add_train_command(CLI::App& app) {
  static TrainArgs a;
  auto* sub = app.add_subcommand("train", "Train a model on a task; metrics to the results DB, checkpoints to --out");
  sub->add_option("--config", a.config, "Run configuration (JSON object of config keys)");
  sub->add_option("--model", a.model, "Model family (instead of or overriding the config's)");
  sub->add_option("--task", a.task, "Task (instead of or overriding the config's)");
  sub->add_option("--set", a.sets, "Override a config key: key=value (repeatable)");
  sub->add_option("--db", a.db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--out", a.out, "Run directory for checkpoints (default out/runs/<model>-<task>-<hash>)");
  sub->add_option("--device", a.device, "cpu | cuda | auto (overrides the config)");
  sub->add_option("--sweep", a.sweep, "Sweep name recorded with the run")->group("");
  sub->add_flag("--resume", a.resume, "Continue from the last checkpoint in --out");
  sub->add_flag("--quiet", a.quiet, "No progress lines");
  sub->add_option("--stop-after", a.stop_after, "Checkpoint and stop after N steps of this invocation (resume later)");
  auto* nproc_opt = sub->add_option("--nproc", a.nproc,
                  "Data-parallel: start N local ranks of this command (Gloo on CPU, NCCL on CUDA; batch_size is "
                  "shared by the ranks). Without it, torchrun's RANK/WORLD_SIZE/... or Slurm's SLURM_PROCID/"
                  "SLURM_NTASKS/... make this process one rank of a job");
  sub->add_option("--dist-timeout", a.dist_timeout_s,
                  "Data-parallel: seconds a rank waits for the others (rendezvous, each collective) before it "
                  "ends with an error (default 1800)");
  sub->add_option("--dist-bucket-mb", a.dist_bucket_mb,
                  "Data-parallel: gradient bucket size in MB (default 25, as DDP's bucket_cap_mb)");
  sub->add_flag("--no-dist-overlap", a.no_dist_overlap,
                "Data-parallel: all-reduce the gradients after the backward instead of during it (comparison)");
  sub->footer(train_footer());
  sub->callback([nproc_opt] {
    // --nproc is checked whole before a rank starts (launch_local_ranks: the count, the port): one line, not one
    // per rank after the spawn.
    if (nproc_opt->count() > 0) check_nproc(a.nproc);
    if (!(a.dist_timeout_s > 0)) throw Error("--dist-timeout must be > 0 seconds");
    if (!(a.dist_bucket_mb > 0) || a.dist_bucket_mb > 1e6)
      throw Error("--dist-bucket-mb must be in (0, 1e6] MB, got " + std::to_string(a.dist_bucket_mb));
    json cfg = a.config.empty() ? json::object() : read_json_file(a.config);
    if (!cfg.is_object()) throw Error(a.config + ": the run configuration must be a JSON object");
    if (!a.model.empty()) cfg["model"] = a.model;
    if (!a.task.empty()) cfg["task"] = a.task;
    if (a.config.empty() && (a.model.empty() || a.task.empty()))
      throw Error("give --config FILE.json, or --model NAME and --task NAME");
    apply_overrides(cfg, a.sets);
    if (a.nproc >= 1) {  // the launcher: the ranks are this same command without --nproc (1: a one-rank job)
      // The ranks split batch_size (trainer.cpp): checked here once rather than by every rank after the spawn.
      const int64_t batch = resolve_run_config(cfg).at("batch_size");
      if (batch % a.nproc != 0)
        throw Error("--nproc " + std::to_string(a.nproc) + ": batch_size " + std::to_string(batch) +
                    " is not a multiple of the " + std::to_string(a.nproc) +
                    " ranks (each rank trains on batch_size / nproc rows); pick an nproc that divides it");
      const int code = launch_local_ranks(a.nproc, without_option(own_command_line(), "--nproc"), 30.0);
      if (code != 0) std::exit(code);
      return;
    }
    TrainOptions opt;
    opt.db_path = a.db;
    opt.out_dir = a.out;
    opt.device = a.device;
    opt.resume = a.resume;
    opt.sweep = a.sweep;
    opt.quiet = a.quiet;
    opt.stop_after = a.stop_after;
    opt.dist = dist_env_from_process();
    opt.dist_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.dist_timeout_s * 1000));
    opt.dist_bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(a.dist_bucket_mb * 1024 * 1024));
    opt.dist_overlap = !a.no_dist_overlap;
    // SIGINT / SIGTERM: the loop checkpoints, marks the run 'stopped' and returns; exit 128 + signal.
    install_stop_handlers();
    auto r = train(cfg, opt);
    if (r.rank != 0) {  // one summary per job: rank 0's
      if (r.stop_signal != 0) std::exit(128 + r.stop_signal);
      return;
    }
    if (r.stop_signal != 0) {
      std::cout.flush();
      if (r.run_id == 0)
        std::cerr << "mnemo: interrupted by " << stop_signal_name() << " before the run started; nothing recorded\n";
      else
        std::cerr << "mnemo: interrupted by " << stop_signal_name() << ": run " << r.run_id << " stopped at step "
                  << r.steps << " (checkpoint in " << r.out_dir << "); the same command with --resume continues\n";
      std::cerr.flush();
      std::exit(128 + r.stop_signal);
    }
    auto number = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };  // NaN: not measured
    json summary = {{"run_id", r.run_id}, {"steps", r.steps}, {"best_test_accuracy", number(r.best_test_accuracy)},
                    {"final_test_accuracy", number(r.final_test_accuracy)},
                    {"final_train_loss", number(r.final_train_loss)}, {"train_tokens_per_s", r.tokens_per_s},
                    {"wall_s", r.wall_s}, {"out_dir", r.out_dir}, {"db", a.db}};
    if (!r.primary_metric.empty() && r.primary_metric != "accuracy") {
      summary["primary_metric"] = r.primary_metric;
      summary["best_" + r.primary_metric] = number(r.best_primary);
      summary["final_" + r.primary_metric] = number(r.final_primary);
    }
    if (r.already_completed) summary["already_completed"] = true;
    if (!r.dist_backend.empty()) {
      summary["world_size"] = r.world_size;
      summary["dist_backend"] = r.dist_backend;
      summary["allreduce_s_per_step"] = r.allreduce_s_per_step;
      summary["buckets_in_backward_per_step"] = r.buckets_in_backward_per_step;
    }
    if (r.stopped) summary["stopped"] = true;
    std::cout << summary.dump() << "\n";
  });
}

}  // namespace mnemo::cli
