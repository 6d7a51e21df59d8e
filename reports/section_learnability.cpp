// Learnability (docs/tasks.md#learnability; Atlas figure `fig:learnability-1`): normalised online loss
// vs sequence position, one panel per setting, one line per memory; summary table of the final
// loss (last 512 positions) and the first position where the smoothed loss drops below 1.
#include <cmath>
#include <map>
#include <set>

#include "reports/report.h"

namespace mnemo {

namespace {

struct Curve {
  int setting = 0;
  std::string label;
  std::string created_at;
  std::vector<std::pair<double, double>> points;  // (bucket centre, loss)
  double final_loss = NAN, first_below = NAN;
  int64_t seeds = 0;
};

std::string memory_label(const json& s) {
  std::string label = s.value("memory", "?");
  std::string extra;
  if (s.contains("optimizer")) extra = s["optimizer"].get<std::string>() + ", ";
  if (s.contains("lr")) extra += "lr " + format_number(s["lr"].get<double>(), 4);
  if (s.value("d", int64_t{256}) != 256) extra += ", d=" + std::to_string(s["d"].get<int64_t>());
  return extra.empty() ? label : label + " (" + extra + ")";
}

void learnability_section(ReportContext& ctx) {
  // One curve per configuration (setting_json without the bucket); the latest rows win.
  std::map<std::string, Curve> curves;
  for (const EvalRow& e : ctx.db.evals("learnability")) {
    if (e.task != "learnability") continue;
    json s;
    try {
      s = json::parse(e.setting_json);
    } catch (const json::exception&) {
      throw Error("results database " + ctx.db.path() + ": eval row " + std::to_string(e.id) +
                  " has an invalid setting_json");
    }
    const double start = s.value("bucket_start", -1.0), end = s.value("bucket_end", -1.0);
    s.erase("bucket_start");
    s.erase("bucket_end");
    Curve& c = curves[s.dump()];
    if (e.created_at > c.created_at) {  // a newer run of the same configuration replaces the old
      c = Curve{};
      c.created_at = e.created_at;
    } else if (e.created_at < c.created_at) {
      continue;
    }
    c.setting = s.value("setting", 0);
    c.label = memory_label(s);
    c.seeds = s.value("seeds", int64_t{0});
    if (e.metric == "normalized_loss" && start >= 0) c.points.emplace_back(0.5 * (start + end), e.value);
    if (e.metric == "final_loss") c.final_loss = e.value;
    if (e.metric == "first_below_1") c.first_below = e.value;
  }
  if (curves.empty()) return;

  ctx.md << "## Learnability (Atlas): online loss vs position\n\n";
  ctx.md << "Each memory is trained online on pairs (i_j, o_j), d as listed (paper: 256); loss_j = "
            "||M(i_j) - o_j||² / ||o_j||² is recorded before the update at j (docs/tasks.md#learnability; the paper prints "
            "||i_j - o_j||², a typo). Curves are means over seeds and over buckets of positions; loss < 1 is "
            "better than predicting zero. Settings: 1 low-rank map, 2 MLP map, 3 attention + MLP, 4 attention "
            "outputs as inputs, 5 sliding-window attention + MLP. Paper expectation: all eventually < 1; 1 "
            "easiest; 4 faster than 2; 3 and 5 hardest, 3 better than 5.\n\n";

  std::map<int, std::vector<Series>> by_setting;
  std::set<std::string> labels;
  for (auto& [key, c] : curves) {
    if (c.points.empty()) continue;
    std::sort(c.points.begin(), c.points.end());
    Series s;
    s.label = c.label;
    for (const auto& [x, y] : c.points) {
      s.x.push_back(x);
      s.y.push_back(y);
    }
    by_setting[c.setting].push_back(std::move(s));
    labels.insert(c.label);
  }
  if (!by_setting.empty()) {
    LinePlot plot;
    plot.name = "learnability_loss_vs_position";
    plot.title = "Learnability: normalised online loss vs position";
    plot.xlabel = "position j";
    plot.ylabel = "loss_j (bucket mean)";
    plot.log_y = 10;
    plot.points = false;
    for (auto& [setting, series] : by_setting) {
      Panel p;
      p.title = "setting " + std::to_string(setting);
      const json names = ctx.catalog.value("learnability", json::object()).value("settings", json::object());
      if (names.contains(std::to_string(setting))) p.title += ": " + names[std::to_string(setting)].get<std::string>();
      p.series = std::move(series);
      plot.panels.push_back(std::move(p));
    }
    ctx.add_figure(plot_lines(plot, ctx.figure_dir), "Learnability: loss vs position, one panel per setting");
  }

  std::set<int> settings;
  for (const auto& [key, c] : curves) settings.insert(c.setting);
  std::vector<std::string> header{"memory"};
  for (int s : settings) header.push_back("setting " + std::to_string(s));
  std::vector<std::vector<std::string>> rows;
  for (const auto& label : labels) {
    std::vector<std::string> row{label};
    for (int s : settings) {
      std::string cell = "–";
      for (const auto& [key, c] : curves)
        if (c.setting == s && c.label == label) {
          cell = format_number(c.final_loss, 3) + " / " +
                 (std::isnan(c.first_below) ? "?" : c.first_below < 0 ? "never" : format_number(c.first_below, 0));
        }
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  ctx.md << "Final loss (mean over the last 512 positions) / first position where the loss, smoothed over 64 "
            "positions, is below 1:\n\n"
         << markdown_table(header, rows) << "\n";
}

}  // namespace

void register_learnability_section() { register_report_section("learnability", 45, learnability_section); }

}  // namespace mnemo
