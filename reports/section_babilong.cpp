// BABILong (docs/tasks.md#babilong): from the `evals` rows that BabilongTask::evaluate writes (metric
// accuracy = label sets, or substring_accuracy; setting {"length", "haystack", "format", ...}):
// accuracy vs context length per task, one line per model, one figure per (haystack, format,
// scorer) so numbers measured differently are never mixed; the qa1–qa5 mean (the curve the
// papers report) when a model has all five at a length. The latest row wins per cell.
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/report.h"

namespace mnemo {

namespace {

struct BabilongCell {
  double value = NAN;
  int64_t n = 0, id = 0;
};

// task number -> model -> length -> cell
using BabilongGrid = std::map<int, std::map<std::string, std::map<int64_t, BabilongCell>>>;
using GroupKey = std::tuple<std::string, std::string, std::string>;  // haystack, format, metric

// File-name-safe stem: letters and digits kept, runs of anything else -> '_'.
std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (keep) out.push_back(c);
    else if (!out.empty() && out.back() != '_') out.push_back('_');
  }
  return out;
}

std::string length_label(int64_t L) {
  if (L == 0) return "0";
  if (L % 1024 == 0) return std::to_string(L / 1024) + "K";
  if (L % 1000 == 0) return std::to_string(L / 1000) + "k";
  return std::to_string(L);
}

void babilong_section(ReportContext& ctx) {
  const auto rows = ctx.db.evals("babilong_qa");
  std::map<std::string, std::set<std::string>> checkpoints;
  for (const auto& r : rows) checkpoints[r.model].insert(r.checkpoint);
  std::map<GroupKey, BabilongGrid> groups;
  for (const auto& r : rows) {
    if (r.metric != "accuracy" && r.metric != "substring_accuracy") continue;
    int task = 0;
    try {
      task = std::stoi(r.task.substr(std::string("babilong_qa").size()));
    } catch (const std::exception&) {
      continue;
    }
    json s;
    try {
      s = json::parse(r.setting_json);
    } catch (const json::exception&) {
      continue;
    }
    if (!s.contains("length") || !s["length"].is_number_integer()) continue;
    std::string model = r.model.empty() ? "(unnamed model)" : r.model;
    if (checkpoints[r.model].size() > 1) model += " @ " + r.checkpoint;
    std::string format = config_string(s, "format", "?");
    if (format == "prompted")
      format += std::string(" (instruction ") + (s.value("with_instruction", true) ? "yes" : "no") + ", examples " +
                (s.value("with_examples", true) ? "yes" : "no") + ", post-prompt " +
                (s.value("with_post_prompt", true) ? "yes" : "no") + ")";
    // Length 0 (facts only) has no haystack: it belongs to every haystack's curve.
    const std::string haystack = config_string(s, "haystack", "?");
    BabilongCell& c = groups[{haystack, format, r.metric}][task][model][s["length"].get<int64_t>()];
    if (r.id >= c.id) c = {r.value, r.n, r.id};
  }
  if (groups.empty()) return;
  // Move the facts-only cells (haystack "none") into the groups that share format and metric.
  for (auto it = groups.begin(); it != groups.end();) {
    const auto& [haystack, format, metric] = it->first;
    bool merged = false;
    if (haystack == "none") {
      for (auto& [key, grid] : groups) {
        if (std::get<0>(key) == "none" || std::get<1>(key) != format || std::get<2>(key) != metric) continue;
        for (const auto& [task, models] : it->second)
          for (const auto& [model, lens] : models)
            for (const auto& [L, cell] : lens) grid[task][model][L] = cell;
        merged = true;
      }
    }
    it = merged ? groups.erase(it) : std::next(it);
  }

  ctx.md << "## BABILong\n\n";
  ctx.md << "Accuracy (%) vs context length per bAbI task (docs/tasks.md#babilong): facts hidden in distractor "
            "text, answer by greedy generation. `accuracy` = BABILong label-set scoring (`compare_answers`); "
            "`substring_accuracy` = the looser substring option. The haystack names the distractor corpus: "
            "the papers used PG-19, so only a `pg19` haystack is comparable with their figures.\n\n";

  for (const auto& [key, grid] : groups) {
    const auto& [haystack, format, metric] = key;
    std::set<int64_t> lengths;
    std::set<std::string> models;
    for (const auto& [task, by_model] : grid)
      for (const auto& [model, by_len] : by_model) {
        models.insert(model);
        for (const auto& [L, c] : by_len) lengths.insert(L);
      }
    ctx.md << "### haystack " << haystack << ", format " << format << ", " << metric << "\n\n";

    LinePlot plot;
    plot.name = "babilong_" + slug(haystack + "_" + format + "_" + metric);
    plot.title = "BABILong (" + haystack + ", " + format + ", " + metric + ")";
    plot.xlabel = "context length (tokens)";
    plot.ylabel = "accuracy (%)";
    plot.ymin = 0;
    plot.ymax = 100;
    plot.log_x = *lengths.begin() > 0 ? 2 : 0;
    std::vector<std::vector<std::string>> table;
    for (const auto& [task, by_model] : grid) {
      Panel p;
      p.title = "qa" + std::to_string(task);
      for (const auto& [model, by_len] : by_model) {
        Series s;
        s.label = model;
        s.family = family_of_label(model);
        std::vector<std::string> row{"qa" + std::to_string(task), model};
        for (int64_t L : lengths) {
          auto it = by_len.find(L);
          if (it == by_len.end()) {
            row.push_back("-");
            continue;
          }
          s.x.push_back(static_cast<double>(L));
          s.y.push_back(it->second.value);
          row.push_back(format_number(it->second.value, 1) + " (n=" + std::to_string(it->second.n) + ")");
        }
        p.series.push_back(std::move(s));
        table.push_back(std::move(row));
      }
      plot.panels.push_back(std::move(p));
    }
    // qa1–qa5 mean, where a model has all five tasks at a length.
    Panel mean_panel;
    mean_panel.title = "mean qa1-qa5";
    for (const auto& model : models) {
      Series s;
      s.label = model;
      s.family = family_of_label(model);
      std::vector<std::string> row{"mean qa1-qa5", model};
      for (int64_t L : lengths) {
        double sum = 0;
        int found = 0;
        for (int t = 1; t <= 5; ++t) {
          auto ti = grid.find(t);
          if (ti == grid.end()) continue;
          auto mi = ti->second.find(model);
          if (mi == ti->second.end()) continue;
          auto li = mi->second.find(L);
          if (li == mi->second.end()) continue;
          sum += li->second.value;
          ++found;
        }
        if (found == 5) {
          s.x.push_back(static_cast<double>(L));
          s.y.push_back(sum / 5);
          row.push_back(format_number(sum / 5, 1));
        } else {
          row.push_back("-");
        }
      }
      if (!s.x.empty()) {
        mean_panel.series.push_back(std::move(s));
        table.push_back(std::move(row));
      }
    }
    if (!mean_panel.series.empty()) plot.panels.push_back(std::move(mean_panel));
    split_panels_by_group(plot);
    ctx.add_figure(plot_lines(plot, ctx.figure_dir),
                   "BABILong accuracy vs context length, one panel per task, one line per model (haystack " +
                       haystack + ")");
    std::vector<std::string> header{"task", "model"};
    for (int64_t L : lengths) header.push_back(length_label(L));
    ctx.md << markdown_table(header, table) << "\n";
  }
}

}  // namespace

void register_babilong_section() { register_report_section("babilong", 35, babilong_section); }

}  // namespace mnemo
