// `mnemo eval --checkpoint DIR --task NAME [--param value ...] [--n N] [--seed S] [--db FILE] [--keep-previous]`
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "engine/evaluate.h"

namespace mnemo::cli {

void add_eval_command(CLI::App& app) {
  static EvalRequest a;
  auto* sub = app.add_subcommand("eval",
                                 "Evaluate a checkpoint on a task; task parameters and evaluation options are "
                                 "flags (e.g. --seq-len 128 --num-kv-pairs 8; S-NIAH: --lengths 1024,2048 "
                                 "--depths 0,50,100)");
  sub->add_option("--checkpoint", a.checkpoint, "Run directory or its checkpoint/ folder")->required();
  sub->add_option("--task", a.task, "Task name (default: the task the model was trained on)");
  auto* n_opt = sub->add_option("--n", a.n, "Examples to evaluate (generation tasks: samples per cell)")
                    ->check(CLI::PositiveNumber);
  auto* seed_opt = sub->add_option("--seed", a.seed, "Base seed of the test examples (default: the run's)");
  sub->add_option("--batch-size", a.batch_size, "Evaluation batch size")->check(CLI::PositiveNumber);
  sub->add_option("--db", a.db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--device", a.device, "cpu | cuda | auto");
  sub->add_flag("--keep-previous", a.keep_previous,
                "Keep the earlier rows of cells evaluated before (the new rows say how many in "
                "details_json.kept_previous); by default a cell's new value replaces them");
  sub->allow_extras();
  sub->callback([sub, seed_opt, n_opt] {
    a.seed_given = seed_opt->count() > 0;
    a.n_given = n_opt->count() > 0;
    a.params = extras_to_params(sub->remaining());
    json out = evaluate_checkpoint(a, [](const std::string& line) { std::cerr << line << "\n"; });
    std::cout << out.dump() << "\n";
  });
}

}  // namespace mnemo::cli
