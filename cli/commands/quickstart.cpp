// `mnemo quickstart [--db FILE] [--out DIR] [--jobs N]`: the main job on the embedded default —
// a small MQAR sweep over every CPU-feasible registered architecture, then the report.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "engine/report_catalog.h"
#include "reports/report.h"
#include "results/db.h"
#include "runtime/registry.h"
#include "engine/sweep.h"

namespace mnemo::cli {

// The built-in sweep: MQAR L = 64, 4 key-value pairs, V = 128 (Zoology semantics), fresh examples
// every step, d_model in {64, 128} (4 heads), 2 layers, 120 steps of 32 sequences at one lr.
// About 15 minutes on 2 cores for every CPU-feasible family (58 cells: 912 s measured). A model that
// has not learned the task in 120 steps shows near-chance accuracy: this is a smoke sweep that exercises
// every family end to end, not a converged comparison (configs/mqar_zoology_small.json is; whether each
// family learns MQAR at all: configs/mqar_learning.json).
json quickstart_sweep(const std::vector<std::string>& models) {
  return {{"name", "quickstart"},
          {"base",
           {{"task", "mqar"}, {"vocab_size", 128}, {"seq_len", 64}, {"num_kv_pairs", 4},
            {"n_layers", 2}, {"n_heads", 4}, {"steps", 120}, {"batch_size", 32}, {"lr", 3e-3},
            {"weight_decay", 0.1}, {"n_train", 0}, {"n_test", 256}, {"eval_every", 50},
            {"log_every", 25}, {"early_stop_acc", 0.99}, {"device", "cpu"}}},
          {"grid", {{"model", models}, {"d_model", {64, 128}}}}};
}

void add_quickstart_command(CLI::App& app) {
  static std::string db = kDefaultDbPath, out = kDefaultReportDir, runs = std::string(kDefaultRunsDir) + "/quickstart";
  static int jobs = 2;
  static std::vector<std::string> only;
  auto* sub = app.add_subcommand("quickstart",
                                 "Main job: a small MQAR sweep over every CPU-feasible architecture, then the report");
  sub->add_option("--db", db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--out", out, std::string("Report folder (default ") + kDefaultReportDir + ")");
  sub->add_option("--runs", runs, "Folder for the runs' checkpoints (default out/runs/quickstart)");
  sub->add_option("--jobs", jobs, "Worker processes (default 2)")->check(CLI::PositiveNumber);
  sub->add_option("--models", only, "Restrict to these model families (default: all CPU-feasible)")->delimiter(',');
  sub->callback([] {
    auto& reg = Registry::instance();
    std::vector<std::string> models;
    for (const auto& name : reg.model_names()) {
      if (!only.empty()) {
        if (std::find(only.begin(), only.end(), name) != only.end()) models.push_back(name);
      } else if (reg.model(name).cpu_quickstart) {
        models.push_back(name);
      }
    }
    for (const auto& m : only) reg.model(m);  // unknown names -> clear error
    if (models.empty()) throw Error("quickstart: no model families selected");
    const double t0 = wall_seconds();
    SweepOptions opt;
    opt.db_path = db;
    opt.jobs = jobs;
    opt.out_root = runs;
    auto sum = run_sweep(quickstart_sweep(models), opt);
    if (sum.stop_signal != 0) {  // SIGINT/SIGTERM: the sweep forwarded it to its workers and waited
      std::cerr << "mnemo: quickstart stopped by signal " << sum.stop_signal << "; re-run it to resume\n";
      std::exit(128 + sum.stop_signal);
    }
    ResultsDB results(db);
    write_report(results, out, report_catalog());
    std::cout << "report: " << (std::filesystem::path(out) / "report.md").string() << "\n"
              << "quickstart wall time: " << wall_seconds() - t0 << " s\n";
    if (sum.failed > 0) {
      std::string msg = std::to_string(sum.failed) + " quickstart run(s) failed:";
      for (const auto& f : sum.failures) msg += "\n  " + f;
      throw Error(msg);
    }
  });
}

}  // namespace mnemo::cli
