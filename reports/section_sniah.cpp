// S-NIAH (docs/tasks.md#s-niah, arXiv:2501.00663, arXiv:2504.13173, arXiv:2505.23735): from the `evals` rows that
// SniahTask::evaluate writes (metric string_match_all, setting {"length", "depth"}), per task:
// a heatmap of accuracy over (depth × length), one panel per model, and accuracy vs length
// (mean over the evaluated depths, weighted by samples), one line per model. Tables give the
// per-length numbers and their mean (the papers' averages). The latest row wins per cell.
#include <cmath>
#include <map>
#include <set>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/report.h"

namespace mnemo {

namespace {

struct SniahCell {
  double value = NAN;
  int64_t n = 0;
  int64_t id = 0;  // latest row wins
};

// model label -> length -> depth -> cell
using SniahGrid = std::map<std::string, std::map<int64_t, std::map<int64_t, SniahCell>>>;

std::string depth_label(int64_t d) { return d < 0 ? "random" : std::to_string(d) + "%"; }

std::string length_label(int64_t L) {
  return L % 1024 == 0 ? std::to_string(L / 1024) + "K" : std::to_string(L);
}

// Model labels: the model name, plus the checkpoint when one model has several.
std::map<int64_t, std::string> row_labels(const std::vector<EvalRow>& rows) {
  std::map<std::string, std::set<std::string>> checkpoints;
  for (const auto& r : rows) checkpoints[r.model].insert(r.checkpoint);
  std::map<int64_t, std::string> out;
  for (const auto& r : rows) {
    std::string label = r.model.empty() ? "(unnamed model)" : r.model;
    if (checkpoints[r.model].size() > 1) label += " @ " + (r.checkpoint.empty() ? "?" : r.checkpoint);
    out[r.id] = label;
  }
  return out;
}

void sniah_section(ReportContext& ctx) {
  const auto rows = ctx.db.evals("sniah_");
  std::map<std::string, SniahGrid> tasks;  // task -> grid
  const auto labels = row_labels(rows);
  int64_t skipped = 0;
  for (const auto& r : rows) {
    if (r.metric != "string_match_all") continue;
    json setting;
    try {
      setting = json::parse(r.setting_json);
    } catch (const json::exception&) {
      ++skipped;
      continue;
    }
    if (!setting.contains("length") || !setting["length"].is_number_integer() || !setting.contains("depth") ||
        !setting["depth"].is_number_integer()) {
      ++skipped;
      continue;
    }
    SniahCell& c = tasks[r.task][labels.at(r.id)][setting["length"].get<int64_t>()][setting["depth"].get<int64_t>()];
    if (r.id >= c.id) c = {r.value, r.n, r.id};
  }
  if (tasks.empty()) return;

  ctx.md << "## S-NIAH (RULER single needle)\n\n";
  ctx.md << "Accuracy = RULER `string_match_all` × 100 (docs/tasks.md#s-niah): greedy decoding of at most "
            "`tokens_to_generate` tokens, prompt + generation budget = the length in the evaluated "
            "tokenizer's tokens. S-NIAH-1 = noise haystack / number, S-NIAH-2 = essays / number, "
            "S-NIAH-3 = essays / UUID. Depth = position of the needle in the haystack.\n\n";

  for (const auto& [task, grid] : tasks) {
    std::set<int64_t> lengths, depths;
    for (const auto& [model, by_len] : grid)
      for (const auto& [L, by_depth] : by_len) {
        lengths.insert(L);
        for (const auto& [d, c] : by_depth) depths.insert(d);
      }
    ctx.md << "### " << task << "\n\n";

    // Heatmap: rows = depths, columns = lengths, one panel per model.
    Heatmap map;
    map.name = task + "_heatmap";
    map.title = task + ": accuracy (%) over needle depth x length";
    map.xlabel = "length (tokens)";
    map.ylabel = "needle depth";
    map.zmin = 0;
    map.zmax = 100;
    map.value_format = "%.0f";
    for (int64_t L : lengths) map.col_labels.push_back(length_label(L));
    for (int64_t d : depths) map.row_labels.push_back(depth_label(d));
    for (const auto& [model, by_len] : grid) {
      HeatmapPanel p;
      p.title = model;
      for (int64_t d : depths) {
        std::vector<double> row;
        for (int64_t L : lengths) {
          double v = NAN;
          auto li = by_len.find(L);
          if (li != by_len.end()) {
            auto di = li->second.find(d);
            if (di != li->second.end()) v = di->second.value;
          }
          row.push_back(v);
        }
        p.values.push_back(std::move(row));
      }
      map.panels.push_back(std::move(p));
    }
    ctx.add_figure(plot_heatmap(map, ctx.figure_dir), task + ": accuracy per (depth, length), one panel per model");

    // Accuracy vs length: mean over depths weighted by samples.
    LinePlot plot;
    plot.name = task + "_vs_length";
    plot.title = task + ": accuracy vs length (mean over depths)";
    plot.xlabel = "length (tokens)";
    plot.ylabel = "accuracy (%)";
    plot.ymin = 0;
    plot.ymax = 100;
    plot.log_x = *lengths.begin() > 0 ? 2 : 0;
    Panel panel;
    panel.title = task;
    std::vector<std::vector<std::string>> table;
    for (const auto& [model, by_len] : grid) {
      Series s;
      s.label = model;
      s.family = family_of_label(model);
      std::vector<std::string> trow{model};
      double sum = 0;
      int count = 0;
      for (int64_t L : lengths) {
        auto li = by_len.find(L);
        if (li == by_len.end()) {
          trow.push_back("-");
          continue;
        }
        double weighted = 0;
        int64_t n = 0;
        for (const auto& [d, c] : li->second) {
          weighted += c.value * static_cast<double>(std::max<int64_t>(c.n, 1));
          n += std::max<int64_t>(c.n, 1);
        }
        const double mean = weighted / static_cast<double>(n);
        s.x.push_back(static_cast<double>(L));
        s.y.push_back(mean);
        trow.push_back(format_number(mean, 1));
        sum += mean;
        ++count;
      }
      trow.push_back(count ? format_number(sum / count, 2) : "-");
      panel.series.push_back(std::move(s));
      table.push_back(std::move(trow));
    }
    plot.panels.push_back(std::move(panel));
    split_panels_by_group(plot);
    ctx.add_figure(plot_lines(plot, ctx.figure_dir), task + ": accuracy vs length, one line per model");

    std::vector<std::string> header{"model"};
    for (int64_t L : lengths) header.push_back(length_label(L));
    header.push_back("mean");
    ctx.md << "Accuracy (%) per length, averaged over the evaluated depths (" << depths.size()
           << " depth setting" << (depths.size() == 1 ? "" : "s") << "):\n\n"
           << markdown_table(header, table) << "\n";
  }
  if (skipped)
    ctx.md << skipped << " S-NIAH result rows without an integer length/depth setting were left out.\n\n";
}

}  // namespace

void register_sniah_section() { register_report_section("sniah", 30, sniah_section); }

}  // namespace mnemo
