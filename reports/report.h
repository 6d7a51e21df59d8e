// `mnemo report`: a registry of report sections, each reading the results database and
// appending Markdown (and figures) to report.md; report.html shows the same with SVG figures.
// A section with no data writes nothing. New sections: a file under reports/ with a
// register function, listed in reports/sections.cpp.
#pragma once
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "reports/gnuplot.h"
#include "results/db.h"

namespace mnemo {

// What the report knows of the tasks beyond the database, handed in by the caller (reports depend on
// results/ and core/ only; engine/tools/report_catalog.h builds it from the generators):
//   {"mad": {"<task>": {"baseline": {task params, n_train, n_test}, "n_settings": N}},
//    "learnability": {"settings": {"1": "low-rank mapping", ...}},
//    "families": [{"name": "gated_deltanet", "group": "linear recurrent", "colour": "green"}, ...]}
// A section whose part is missing still reports what the database holds, without those names.
struct ReportContext {
  ResultsDB& db;
  json catalog;
  std::string out_dir;     // report.md, report.html
  std::string figure_dir;  // out_dir/figures (PNG + SVG; data/ holds the gnuplot inputs)
  std::ostringstream md;   // the Markdown being written

  ReportContext(ResultsDB& database, std::string out, json task_catalog = json::object());
  // Embed a figure rendered under figure_dir: a Markdown image link (PNG, relative path);
  // report.html shows the SVG next to it.
  void add_figure(const Figure& fig, const std::string& caption);
  std::string relative(const std::string& path) const;  // path relative to out_dir
};

using ReportSection = std::function<void(ReportContext&)>;

// Sections run in increasing `order` (ties: registration order). Re-registering a name
// replaces it.
void register_report_section(const std::string& name, int order, ReportSection fn);
std::vector<std::string> report_section_names();  // in run order

// Run every section (built-ins registered on first use) and write out_dir/report.md and
// out_dir/report.html. Returns the path of report.md.
std::string write_report(ResultsDB& db, const std::string& out_dir, const json& catalog = json::object());

// Minimal Markdown -> HTML used for report.html (headings, paragraphs, lists, pipe tables,
// fenced code, images; .png images are shown as their .svg sibling when it exists): a page with
// embedded CSS (a ~1100 px column, figures at their natural width up to the column's, zebra-striped
// tables whose numeric columns — numbers and placeholders only — are right-aligned on one line and whose text
// columns are left-aligned and wrapped), a table of contents of the h2/h3 headings (each heading gets an id) after the first h1, and
// tables with a header row sortable by clicking a header (inline script; without it, the report's order).
std::string markdown_to_html(const std::string& markdown, const std::string& title,
                             const std::string& base_dir);

// Defined in reports/sections.cpp: registers every built-in section.
void register_builtin_report_sections();

// -- small helpers shared by sections --
// A Markdown pipe table (cells are escaped: '|' -> '\|').
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows);
std::string format_number(double v, int precision = 3);  // "n/a" for NaN; fixed or %g
std::string format_count(double v);                      // 1234567 -> "1.23M"
// Parse a run's config_json; throws Error naming the database and run id.
json run_config(const ResultsDB& db, const RunInfo& run);
// A numeric config value (a JSON number, or a string that parses fully as one); nullopt if absent.
std::optional<double> config_number(const json& config, const std::string& key);
// A string config value, or `fallback` when absent or not a string.
std::string config_string(const json& config, const std::string& key, const std::string& fallback);

}  // namespace mnemo
