// `mnemo db merge OUT.sqlite IN1.sqlite IN2.sqlite ...`: one results database from several (the shards of a sweep
// run on many machines, each into its own SQLite file: SQLite must not be shared over a network file system).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "engine/config/run_config.h"
#include "results/db.h"

namespace mnemo::cli {

void add_db_command(CLI::App& app) {
  auto* db = app.add_subcommand("db", "Results-database tools: merge");
  db->require_subcommand(1);
  auto* merge = db->add_subcommand(
      "merge", "Merge results databases into OUT (created if missing): runs with their metrics, evaluations and "
               "benches; run ids renumbered; a cell (config hash) completed in OUT is not copied again; a run merged "
               "before is brought up to date where the input's row is newer");
  auto files = std::make_shared<std::vector<std::string>>();
  merge->add_option("files", *files, "OUT.sqlite IN1.sqlite [IN2.sqlite ...]")->required()->expected(2, -1);
  merge->callback([files] {
    const std::string out = files->front();
    const std::vector<std::string> inputs(files->begin() + 1, files->end());
    // Runs are matched by config hash: every database's hashes under the current rule first.
    for (const std::string& path : *files) {
      if (!std::filesystem::is_regular_file(path)) continue;  // a missing input is named by the merge itself
      ResultsDB db(path);
      rehash_runs_if_old(db);
    }
    const MergeSummary s = merge_results_databases(out, inputs);
    std::cout << json{{"out", out},
                      {"inputs", s.inputs},
                      {"runs_copied", s.runs_copied},
                      {"runs_updated", s.runs_updated},
                      {"runs_skipped", s.runs_skipped},
                      {"evals_copied", s.evals_copied},
                      {"benches_copied", s.benches_copied}}
                     .dump()
              << "\n";
  });
}

}  // namespace mnemo::cli
