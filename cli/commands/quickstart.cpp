// `mnemo quickstart [--db FILE] [--out DIR] [--jobs N]`: the main job (engine/tools/quickstart.h) — an
// MQAR sweep (one run per family, tested at three numbers of key-value pairs) and a tiny language-modelling comparison, then the
// report with the papers' claims each run can test.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "core/progress.h"
#include "engine/tools/report_catalog.h"
#include "reports/claims.h"
#include "reports/report.h"
#include "results/db.h"
#include "runtime/registry.h"
#include "engine/tools/quickstart.h"
#include "engine/tools/sweep.h"

namespace mnemo::cli {

void add_quickstart_command(CLI::App& app) {
  static std::string db = kDefaultDbPath, out = kDefaultReportDir, runs = kDefaultRunsDir;
  static double progress_every = 30;
  static int jobs = 2;
  static std::vector<std::string> only;
  static bool skip_lm = false;
  auto* sub = app.add_subcommand("quickstart",
                                 "Main job: MQAR at 8, 16 and 32 key-value pairs and a tiny LM comparison, then the report");
  sub->add_option("--db", db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--out", out, std::string("Report folder (default ") + kDefaultReportDir + ")");
  sub->add_option("--runs", runs, "Folder for the runs' checkpoints (default out/runs; each stage in its own subfolder)");
  sub->add_option("--jobs", jobs, "Worker processes (default 2)")->check(CLI::PositiveNumber);
  sub->add_option("--models", only, "MQAR stage: these model families instead of the default five")->delimiter(',');
  sub->add_flag("--skip-lm", skip_lm, "Leave out the language-modelling stage (it needs the data directory's corpus)");
  sub->add_option("--progress-every", progress_every,
                  "When stdout is not a terminal: print each running run's progress every S seconds (default 30; "
                  "0: never). On a terminal it is redrawn in place every second")
      ->check(CLI::NonNegativeNumber);
  sub->callback([] {
    auto& reg = Registry::instance();
    for (const auto& m : only) reg.model(m);  // unknown names -> clear error
    const std::vector<std::string> mqar_models = only.empty() ? quickstart_mqar_models() : only;
    const double t0 = wall_seconds();
    SweepOptions opt;
    opt.db_path = db;
    opt.jobs = jobs;
    opt.progress_every_s = progress_every;
    std::vector<json> stages{quickstart_mqar_sweep(mqar_models)};
    if (!skip_lm) stages.push_back(quickstart_lm_sweep(quickstart_lm_models()));
    std::vector<std::string> failures;
    for (const json& stage : stages) {
      opt.out_root = (std::filesystem::path(runs) / stage["name"].get<std::string>()).string();
      auto sum = run_sweep(stage, opt);
      if (sum.stop_signal != 0) {  // SIGINT/SIGTERM: the sweep forwarded it to its workers and waited
        std::cerr << "mnemo: quickstart stopped by signal " << sum.stop_signal << "; re-run it to resume\n";
        std::exit(128 + sum.stop_signal);
      }
      failures.insert(failures.end(), sum.failures.begin(), sum.failures.end());
    }
    ResultsDB results(db);
    const std::string markdown = write_report(results, out, report_catalog());
    // The claims table as text, then where to read the rest (the page to open in a browser).
    const std::string claims = claims_text_table(mqar_claim_verdicts(results));
    if (!claims.empty()) std::cout << "\n" << claims << "\n";
    std::cout << "report: " << (std::filesystem::path(out) / "report.html").string() << " (Markdown: " << markdown
              << ")\n"
              << "quickstart wall time: " << format_duration(wall_seconds() - t0) << "\n";
    if (!failures.empty()) {
      std::string msg = std::to_string(failures.size()) + " quickstart run(s) failed:";
      for (const auto& f : failures) msg += "\n  " + f;
      throw Error(msg);
    }
  });
}

}  // namespace mnemo::cli
