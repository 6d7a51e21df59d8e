// MAD (docs/tasks.md#mad): the MAD score table (model x task, best over lr x wd per difficulty
// setting, mean over settings, mean over tasks), the Atlas reference table with recomputed
// averages, a model x task heatmap and accuracy-vs-difficulty plots per task.
#include <cmath>
#include <map>
#include <set>

#include "reports/mad_score.h"
#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/report.h"

namespace mnemo {

namespace {

struct Column {
  std::string task, header;
};

const std::vector<Column>& columns() {
  static const std::vector<Column> c = {{"compression", "Compression"},
                                        {"noisy_in_context_recall", "Noisy ICR"},
                                        {"in_context_recall", "ICR"},
                                        {"fuzzy_in_context_recall", "Fuzzy ICR"},
                                        {"selective_copying", "Selective copying"},
                                        {"memorization", "Memorization"}};
  return c;
}

std::string pct(double v) { return std::isfinite(v) ? format_number(100.0 * v, 1) : "–"; }

// The changed variable and its value of a single-change setting ("vocab_size=32"), or nullopt.
std::optional<std::pair<std::string, double>> single_change(const std::string& label) {
  if (label == "baseline" || label.find(", ") != std::string::npos) return std::nullopt;
  auto eq = label.find('=');
  try {
    return std::make_pair(label.substr(0, eq), std::stod(label.substr(eq + 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void paper_table(ReportContext& ctx) {
  struct Row {
    const char* model;
    double c[5];
    double printed_avg;
  };
  // Atlas MAD table (arXiv:2505.23735): Compression, (Noisy) ICR, Fuzzy ICR, Selective Copying,
  // Memorization; Average = mean of the 5 columns (recomputed here).
  const Row rows[] = {{"Transformers", {49.4, 100, 48.2, 95.9, 83.8}, 75.46},
                      {"Gated DeltaNet", {44.8, 100, 32.5, 96.2, 81.7}, 71.04},
                      {"Titans", {49.6, 100, 49.7, 99.4, 83.5}, 76.44},
                      {"OmegaNet", {50.9, 100, 54.2, 99.6, 90.2}, 78.98},
                      {"ATLAS", {51.6, 100, 54.9, 99.6, 91.4}, 79.50}};
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows) {
    double sum = 0;
    std::vector<std::string> cells{r.model};
    for (double v : r.c) {
      sum += v;
      cells.push_back(format_number(v, 1));
    }
    const double avg = sum / 5.0;
    cells.push_back(format_number(avg, 2) + (std::fabs(avg - r.printed_avg) > 0.01 ? " ⚠ printed " +
                                                 format_number(r.printed_avg, 2) : ""));
    table.push_back(cells);
  }
  ctx.md << "Paper reference (Atlas, MAD table; arXiv:2505.23735; the paper's models are ~10^2-10^3 times "
            "larger in training budget than CPU runs — compare rankings, not values):\n\n";
  ctx.md << markdown_table({"model (paper)", "Compression", "(Noisy) ICR", "Fuzzy ICR", "Selective copying",
                            "Memorization", "Average (recomputed)"},
                           table)
         << "\n";
}

void mad_section(ReportContext& ctx) {
  MadRunsFromDb data = mad_runs_from_db(ctx.db, ctx.catalog);
  if (data.runs.empty() && data.skipped_runs.empty()) return;
  auto scores = compute_mad_scores(data.runs);

  ctx.md << "## MAD synthetic tasks\n\n";
  ctx.md << "Protocol (mad-lab; docs/tasks.md#mad): per run, the test `" << data.accuracy_metric
         << "` at the evaluation with the lowest test loss (mad-lab reports the checkpoint with the lowest "
            "test perplexity); per (model, task, difficulty setting) the best run over the lr x weight-decay "
            "grid; task score = mean over the task's settings; MAD score = mean over the tasks. "
         << (data.accuracy_metric == "accuracy_macro"
                 ? "Accuracy is mad-lab's: macro average over classes per batch of 128, averaged over batches."
                 : "Accuracy is mnemo's token accuracy (mean over labelled positions per example, then over "
                   "examples), not mad-lab's macro average: the runs did not log `accuracy_macro`.")
         << " The Atlas average is the mean of the five Atlas columns, with the noisy ICR score as \"(Noisy) "
            "ICR\" (docs/tasks.md#mad). Values in %.\n\n";

  std::vector<std::string> header{"model"};
  for (const auto& c : columns()) header.push_back(c.header);
  header.push_back("MAD score (6 tasks)");
  header.push_back("Atlas average (5 columns)");
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, size_t> expected;
  if (ctx.catalog.contains("mad"))
    for (auto it = ctx.catalog["mad"].begin(); it != ctx.catalog["mad"].end(); ++it)
      expected[it.key()] = it.value().value("n_settings", size_t{0});
  for (const auto& [model, m] : scores) {
    std::vector<std::string> row{model};
    for (const auto& c : columns()) {
      auto it = m.tasks.find(c.task);
      if (it == m.tasks.end()) {
        row.push_back("–");
        continue;
      }
      std::string cell = pct(it->second.score);
      if (it->second.settings.size() != expected[c.task])
        cell += " (" + std::to_string(it->second.settings.size()) + "/" + std::to_string(expected[c.task]) + " settings)";
      row.push_back(cell);
    }
    row.push_back(pct(m.mad_score) + (m.tasks_present < 6 ? " (" + std::to_string(m.tasks_present) + " tasks)" : ""));
    row.push_back(pct(m.atlas_average));
    rows.push_back(row);
  }
  if (!rows.empty()) ctx.md << markdown_table(header, rows) << "\n";
  paper_table(ctx);

  if (!scores.empty()) {
    Heatmap map;
    map.name = "mad_scores";
    map.title = "MAD task scores (%)";
    map.xlabel = "task";
    map.ylabel = "model";
    for (const auto& c : columns()) map.col_labels.push_back(c.header);
    HeatmapPanel panel;
    for (const auto& [model, m] : scores) {
      map.row_labels.push_back(model);
      std::vector<double> values;
      for (const auto& c : columns()) {
        auto it = m.tasks.find(c.task);
        values.push_back(it == m.tasks.end() ? NAN : 100.0 * it->second.score);
      }
      panel.values.push_back(values);
    }
    map.panels.push_back(panel);
    map.zmin = 0;
    map.zmax = 100;
    ctx.add_figure(plot_heatmap(map, ctx.figure_dir), "MAD task scores per model (mean over difficulty settings)");

    // The ranking by MAD score (mean over the tasks each model has).
    BarPlot bars;
    bars.name = "mad_ranking";
    bars.title = "MAD score ranking";
    bars.xlabel = "MAD score (%), mean over the tasks present";
    bars.xmin = 0;
    bars.xmax = 114;
    bars.value_format = "%.1f";
    BarPanel bp;
    for (const auto& [model, m] : scores)
      if (std::isfinite(m.mad_score))
        bp.bars.push_back({model + (m.tasks_present < 6 ? " (" + std::to_string(m.tasks_present) +
                                                       (m.tasks_present == 1 ? " task)" : " tasks)")
                                                 : ""),
                           family_of_label(model), 100.0 * m.mad_score, ""});
    bars.panels.push_back(std::move(bp));
    if (!bars.panels[0].bars.empty())
      ctx.add_figure(plot_bars(bars, ctx.figure_dir),
                     "MAD score per model, best first. No chance line: the six tasks have different chance levels "
                     "(1 / their vocabulary of answers), so their mean has none");
  }

  // Accuracy vs difficulty: one plot per task, one panel per varied variable (the baseline is a
  // point on every panel), one line per model.
  for (const auto& c : columns()) {
    std::map<std::string, std::map<std::string, Series>> panels;  // variable -> model -> series
    std::set<std::string> variables;
    for (const auto& [model, m] : scores) {
      auto it = m.tasks.find(c.task);
      if (it == m.tasks.end()) continue;
      for (const auto& [label, s] : it->second.settings)
        if (auto ch = single_change(label)) variables.insert(ch->first);
    }
    if (variables.empty()) continue;
    const json base = ctx.catalog["mad"][c.task]["baseline"];
    for (const auto& [model, m] : scores) {
      auto it = m.tasks.find(c.task);
      if (it == m.tasks.end()) continue;
      for (const auto& [label, s] : it->second.settings) {
        std::vector<std::pair<std::string, double>> points;
        if (label == "baseline") {
          for (const auto& v : variables)
            if (base.contains(v) && base[v].is_number()) points.emplace_back(v, base[v].get<double>());
        } else if (auto ch = single_change(label)) {
          points.push_back(*ch);
        }
        for (const auto& [var, x] : points) {
          Series& series = panels[var][model];
          series.label = model;
          series.family = family_of_label(model);
          series.x.push_back(x);
          series.y.push_back(100.0 * s.best);
        }
      }
    }
    LinePlot plot;
    plot.name = "mad_difficulty_" + c.task;
    plot.title = "MAD " + c.header + ": best test accuracy (%) per difficulty setting";
    plot.xlabel = "value of the varied parameter";  // each panel: the parameter's name
    plot.ylabel = "accuracy (%)";
    plot.ymin = 0;
    plot.ymax = 100;
    for (auto& [var, by_model] : panels) {
      Panel p;
      p.title = var;
      p.xlabel = var;
      for (auto& [model, s] : by_model) p.series.push_back(s);
      plot.panels.push_back(std::move(p));
    }
    split_panels_by_group(plot);
    plot.share_y = true;
    ctx.add_figure(plot_lines(plot, ctx.figure_dir), "MAD " + c.header + ": accuracy vs difficulty (baseline included in every panel)");

    // The numbers: setting x model, "best (lr, wd, runs)".
    std::set<std::string> labels;
    for (const auto& [model, m] : scores) {
      auto it = m.tasks.find(c.task);
      if (it != m.tasks.end())
        for (const auto& [label, s] : it->second.settings) labels.insert(label);
    }
    std::vector<std::string> h{"setting"};
    for (const auto& [model, m] : scores) h.push_back(model);
    std::vector<std::vector<std::string>> detail;
    for (const auto& label : labels) {
      std::vector<std::string> row{label};
      for (const auto& [model, m] : scores) {
        auto it = m.tasks.find(c.task);
        if (it == m.tasks.end() || !it->second.settings.count(label)) {
          row.push_back("–");
          continue;
        }
        const auto& s = it->second.settings.at(label);
        row.push_back(pct(s.best) + " (lr " + format_number(s.best_lr, 4) + ", wd " +
                      format_number(s.best_weight_decay, 2) + ", " + std::to_string(s.runs) + " runs)");
      }
      detail.push_back(row);
    }
    ctx.md << "**" << c.header << "** — best test accuracy per setting (%; best lr, weight decay, runs):\n\n"
           << markdown_table(h, detail) << "\n";
  }
  if (!data.skipped_runs.empty()) {
    std::string ids;
    for (int64_t id : data.skipped_runs) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    ctx.md << "Completed MAD runs without test accuracy (left out): " << ids << ".\n\n";
  }
}

}  // namespace

void register_mad_section() { register_report_section("mad", 40, mad_section); }

}  // namespace mnemo
