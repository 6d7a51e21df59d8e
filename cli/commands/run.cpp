// `mnemo run learnability --setting 1..5 --memory M [...]`: the Atlas learnability experiments
// (docs/tasks.md#learnability) — online learning of the five target functions, loss vs position.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "results/db.h"
#include "engine/evaluation/learnability.h"

namespace mnemo::cli {

namespace {
struct LearnabilityArgs {
  std::vector<int> settings;
  std::vector<std::string> memories;
  int64_t d = 256, seq_len = 4096, rank = 16, window = 512, seeds = 3, bucket = 64;
  uint64_t seed = 0;
  double lr = NAN, weight_decay = 0.0;
  std::string optimizer = "adamw", db = kDefaultDbPath, out = std::string(kDefaultRunsDir) + "/learnability";
  bool quiet = false;
};

std::string memory_help() {
  return "Memory (comma-separated list allowed): linear (delta rule), mlp (residual 2-layer MLP memory, "
         "docs/models.md#deep-memory, closed-form GD), mlp2 | mlp3 | mlp2x4 | mlp3x4 (the paper's learners: 2/3 hidden "
         "layers, no or 4x expansion, trained by --optimizer)";
}
}  // namespace

void add_run_command(CLI::App& app) {
  static LearnabilityArgs a;
  auto* run = app.add_subcommand("run", "Run a standalone experiment (learnability)");
  run->require_subcommand(1);
  auto* sub = run->add_subcommand(
      "learnability",
      "Atlas learnability experiments (docs/tasks.md#learnability): an online memory fits (i_j, o_j) pairs; "
      "records loss_j = ||M(i_j) - o_j||^2 / ||o_j||^2 before each update, per position");
  sub->add_option("--setting", a.settings, "Target function 1..5 (comma-separated list allowed): 1 low-rank, "
                                           "2 MLP, 3 attention+MLP, 4 attention outputs as inputs, 5 SWA+MLP")
      ->required()
      ->delimiter(',')
      ->check(CLI::Range(1, 5));
  sub->add_option("--memory", a.memories, memory_help())->required()->delimiter(',');
  sub->add_option("--d", a.d, "Dimension d of i_j and o_j (paper: 256)")->capture_default_str();
  sub->add_option("--seq-len", a.seq_len, "Sequence length t (positions)")->capture_default_str();
  auto* rank_opt = sub->add_option("--rank", a.rank, "Rank k of the low-rank map (setting 1; default min(16, d))")
                       ->capture_default_str();
  sub->add_option("--window", a.window, "Sliding-window size (setting 5)")->capture_default_str();
  sub->add_option("--seeds", a.seeds, "Repetitions (sequence + init seeds seed, seed+1, ...)")->capture_default_str();
  sub->add_option("--seed", a.seed, "First seed")->capture_default_str();
  sub->add_option("--lr", a.lr, "Learning rate (default: 5e-4 for mlp2/mlp3/mlp2x4/mlp3x4, step 0.5/||i||^2 "
                                "for linear and mlp)");
  sub->add_option("--optimizer", a.optimizer, "adamw | adam | rmsprop | sgd (mlp2/mlp3/mlp2x4/mlp3x4)")
      ->capture_default_str();
  sub->add_option("--weight-decay", a.weight_decay, "Optimiser weight decay")->capture_default_str();
  sub->add_option("--bucket", a.bucket, "Positions per stored result row")->capture_default_str();
  sub->add_option("--db", a.db, "Results database")->capture_default_str();
  sub->add_option("--out", a.out, "Directory for the raw per-position CSV curves")->capture_default_str();
  sub->add_flag("--quiet", a.quiet, "No progress lines");
  sub->callback([rank_opt] {
    // Resolve every combination first, so a bad memory name fails before any work.
    std::vector<LearnabilityConfig> configs;
    for (int s : a.settings)
      for (const auto& m : a.memories) {
        LearnabilityConfig c;
        c.target.setting = s;
        c.target.d = a.d;
        c.target.seq_len = a.seq_len;
        c.target.rank = rank_opt->count() > 0 ? a.rank : std::min<int64_t>(a.rank, a.d);
        c.target.window = a.window;
        c.memory = m;
        c.optimizer = a.optimizer;
        c.lr = a.lr;
        c.weight_decay = a.weight_decay;
        c.seeds = a.seeds;
        c.seed = a.seed;
        configs.push_back(resolve(c));
      }
    if (a.bucket < 1) throw Error("--bucket must be >= 1, got " + std::to_string(a.bucket));
    ResultsDB db(a.db);
    for (const auto& c : configs) {
      if (!a.quiet) {
        std::printf("learnability: setting %d (%s), memory %s, d %lld, t %lld, %lld seed(s)...\n", c.target.setting,
                    learnability_setting_name(c.target.setting).c_str(), c.memory.c_str(), (long long)c.target.d,
                    (long long)c.target.seq_len, (long long)c.seeds);
        std::fflush(stdout);
      }
      auto r = run_learnability(c);
      db.add_evals(learnability_eval_rows(r, a.bucket));
      const std::string csv = (std::filesystem::path(a.out) / ("learnability_s" + std::to_string(c.target.setting) +
                                                               "_" + c.memory + ".csv")).string();
      write_learnability_csv(r, csv);
      json summary = to_json(r.config);
      summary["final_loss"] = r.final_loss;
      summary["first_below_1"] = r.first_below_one;
      summary["wall_s"] = r.wall_s;
      summary["csv"] = csv;
      summary["db"] = a.db;
      std::cout << summary.dump() << "\n";
    }
  });
}

}  // namespace mnemo::cli
