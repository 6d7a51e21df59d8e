// Report header: when, which database, how many runs / benchmarks / evaluations, and the
// machine the report was generated on (docs/tasks.md#efficiency-benchmarks: every report prints the machine,
// LibTorch, BLAS, threads and git SHA).
#include <map>
#include <set>

#include "reports/report.h"
#include "core/system_info.h"

namespace mnemo {

namespace {

void header_section(ReportContext& ctx) {
  auto runs = ctx.db.runs();
  auto benches = ctx.db.benches();
  auto evals = ctx.db.evals();
  std::map<std::string, int> by_status;
  std::set<std::string> tasks, models, commits;
  for (const auto& r : runs) {
    ++by_status[ctx.db.observed_status(r)];
    tasks.insert(r.task);
    models.insert(r.model);
    if (!r.git_commit.empty()) commits.insert(r.git_commit);
  }
  auto joined = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
    return out.empty() ? std::string("-") : out;
  };

  ctx.md << "# mnemo report\n\n";
  ctx.md << "- Generated: " << now_iso8601() << "\n";
  ctx.md << "- Results database: `" << ctx.db.path() << "`\n";
  std::string status_text;
  for (const auto& [status, n] : by_status)
    status_text += (status_text.empty() ? "" : ", ") + std::to_string(n) + " " + status;
  ctx.md << "- Training runs: " << runs.size() << (status_text.empty() ? "" : " (" + status_text + ")")
         << "\n";
  if (!runs.empty()) {
    ctx.md << "- Tasks: " << joined(tasks) << "\n";
    ctx.md << "- Models: " << joined(models) << "\n";
    ctx.md << "- Git commits of the runs: " << joined(commits) << "\n";
  }
  ctx.md << "- Benchmark rows: " << benches.size() << "\n";
  ctx.md << "- Evaluation rows: " << evals.size() << "\n\n";

  json sys = system_json();
  std::vector<std::vector<std::string>> rows;
  for (auto it = sys.begin(); it != sys.end(); ++it)
    rows.push_back({it.key(), it->is_string() ? it->get<std::string>() : it->dump()});
  ctx.md << "Machine generating this report (each benchmark table below names the machine it was "
            "measured on):\n\n";
  ctx.md << markdown_table({"property", "value"}, rows) << "\n";
}

}  // namespace

void register_header_section() { register_report_section("header", 0, header_section); }

}  // namespace mnemo
