// `mnemo score --task TASK --predictions FILE.jsonl [--mode strict|substring]`: score predictions
// produced elsewhere with the task's own scorer (engine/score.h) and print the metric as JSON.
// Each line: {"prediction": ..., <the target fields `mnemo generate` writes>}.
#include <iostream>

#include "cli/commands/commands.h"
#include "engine/score.h"

namespace mnemo::cli {

void add_score_command(CLI::App& app) {
  static std::string task, predictions, mode = "strict";
  auto* sub = app.add_subcommand("score", "Score predictions (JSONL with \"prediction\" and the generated target "
                                          "fields) with a task's scorer; prints the metric as JSON");
  sub->add_option("--task", task, "a task with a text scorer: sniah_1|sniah_2|sniah_3|babilong_qa1..babilong_qa20")
      ->required();
  sub->add_option("--predictions", predictions, "JSONL file, one prediction per line")->required();
  sub->add_option("--mode", mode, "BABILong scorer: strict (label sets, default) | substring");
  sub->callback([] { std::cout << score_predictions(task, predictions, mode).dump() << "\n"; });
}

}  // namespace mnemo::cli
