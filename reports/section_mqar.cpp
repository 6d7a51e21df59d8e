// MQAR (docs/tasks.md#mqar): each run's best test accuracy over its evaluations, then the max
// over the learning-rate sweep per (seq_len, num_kv_pairs, model, d_model) — Zoology's
// protocol. Figure: accuracy vs d_model (log2), one line per model, one panel per
// (seq_len, num_kv_pairs) — the shape of Zoology Figure 2 / Lattice Figure 7 — split into one row
// of panels per model group when a panel would hold more than 8 lines; and per (seq_len, num_kv_pairs)
// the ranking at the largest d_model as sorted horizontal bars with the chance level.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/mqar_cells.h"
#include "reports/report.h"

namespace mnemo {

namespace {

std::string format_lr(double lr) {
  if (std::isnan(lr)) return "?";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", lr);
  return buf;
}

void mqar_section(ReportContext& ctx) {
  const MqarCells data = mqar_cells(ctx.db);
  const auto& cells = data.cells;
  const auto& missing_keys = data.missing_keys;
  const auto& no_accuracy = data.no_accuracy;
  const auto& vocab = data.vocab_sizes;
  if (cells.empty() && missing_keys.empty() && no_accuracy.empty()) return;  // no MQAR runs

  ctx.md << "## MQAR: accuracy vs model dimension\n\n";
  ctx.md << "Protocol (Zoology; docs/tasks.md#mqar): each run's best `test/accuracy` over its "
            "evaluations, then the maximum over the learning-rate sweep for each (sequence "
            "length L, key-value pairs N_KV, model, d_model). Accuracy is per example over its "
            "queries, averaged over test examples. A run trained on Zoology's mixture of key-value counts "
            "(`test_num_kv_pairs`) gives one point per tested N_KV, from its `accuracy_nkv<N>` metrics.\n\n";

  if (!cells.empty()) {
    bool fraction = true;
    for (const auto& [key, c] : cells) fraction = fraction && c.accuracy >= 0 && c.accuracy <= 1.0;

    // One panel per (L, N_KV), one series per model.
    std::map<std::pair<int64_t, int64_t>, std::map<std::string, Series>> panels;
    for (const auto& [key, c] : cells) {
      const auto& [L, nkv, model, d] = key;
      Series& s = panels[{L, nkv}][model];
      s.label = s.family = model;
      s.x.push_back(static_cast<double>(d));
      s.y.push_back(c.accuracy);
    }
    LinePlot plot;
    plot.name = "mqar_accuracy_vs_dmodel";
    plot.title = "MQAR: best test accuracy over the lr sweep";
    plot.xlabel = "model dimension d_model";
    plot.ylabel = fraction ? "accuracy" : "accuracy (%)";
    plot.log_x = 2;
    plot.ymin = 0;
    plot.ymax = fraction ? 1.0 : 100.0;
    for (auto& [lk, series] : panels) {
      Panel p;
      p.title = "L = " + std::to_string(lk.first) + ", N_KV = " + std::to_string(lk.second);
      for (auto& [model, s] : series) p.series.push_back(s);
      plot.panels.push_back(std::move(p));
    }
    std::set<int64_t> dims;
    for (const auto& [key, c] : cells) dims.insert(std::get<3>(key));
    if (dims.size() > 1) {
      const bool split = split_panels_by_group(plot);
      plot.share_y = true;
      ctx.add_figure(plot_lines(plot, ctx.figure_dir),
                     std::string("MQAR accuracy vs d_model (max over learning rates), one panel per (L, N_KV)") +
                         (split ? ", one row of panels per model group (colours and markers per family are the "
                                  "same in every figure)"
                                : ""));
    } else {  // one x value: the curves would be overlapping dots; the ranking below shows the same numbers
      ctx.md << "Every MQAR run has d_model = " << *dims.begin()
             << ", so there is no accuracy-vs-d_model curve to draw; the ranking below shows the accuracies "
                "(`configs/mqar_zoology_small.json` sweeps d_model as Zoology's Figure 2 does).\n\n";
    }

    // Ranking at the largest d_model of each (L, N_KV).
    BarPlot bars;
    bars.name = "mqar_ranking";
    bars.title = "MQAR ranking at the largest d_model";
    bars.xlabel = plot.ylabel;
    bars.xmin = 0;
    bars.xmax = (fraction ? 1.0 : 100.0) * 1.14;
    bars.value_format = fraction ? "%.3f" : "%.1f";
    std::string chance_note;
    for (auto& [lk, series] : panels) {
      int64_t top_d = 0;
      for (const auto& [key, c] : cells)
        if (std::get<0>(key) == lk.first && std::get<1>(key) == lk.second) top_d = std::max(top_d, std::get<3>(key));
      BarPanel bp;
      bp.title = "L = " + std::to_string(lk.first) + ", N_KV = " + std::to_string(lk.second) +
                 ", d_model = " + std::to_string(top_d);
      for (const auto& [key, c] : cells)
        if (std::get<0>(key) == lk.first && std::get<1>(key) == lk.second && std::get<3>(key) == top_d)
          bp.bars.push_back({std::get<2>(key), std::get<2>(key), c.accuracy, ""});
      const std::set<int64_t>& vs = vocab.at(lk);
      if (vs.size() == 1) {
        const int64_t V = *vs.begin(), values = V - V / 2;
        bp.chance = (fraction ? 1.0 : 100.0) / static_cast<double>(values);
        bp.chance_label = "chance 1/" + std::to_string(values);
        chance_note += (chance_note.empty() ? "" : "; ") + bp.title + ": V = " + std::to_string(V) + ", chance 1/" +
                       std::to_string(values) + " = " + format_number(*bp.chance, 4);
      } else {
        chance_note += (chance_note.empty() ? "" : "; ") + bp.title + ": runs of several vocabulary sizes, no chance line";
      }
      bars.panels.push_back(std::move(bp));
    }
    ctx.add_figure(plot_bars(bars, ctx.figure_dir),
                   "MQAR ranking per (L, N_KV) at its largest d_model, best first (max over learning rates). "
                   "Dashed line: chance = 1 / (number of value tokens); MQAR draws each value uniformly from the "
                   "upper half [V/2, V) of the vocabulary V (synthetic/mqar.cpp), so a guess among them is right "
                   "with probability 1/(V − V/2) (" + chance_note + ")");

    // The same numbers: per (L, N_KV) a model x d_model table, "accuracy (best lr)".
    for (auto& [lk, series] : panels) {
      std::set<int64_t> dims;
      for (const auto& [key, c] : cells)
        if (std::get<0>(key) == lk.first && std::get<1>(key) == lk.second) dims.insert(std::get<3>(key));
      std::vector<std::string> header{"model"};
      for (int64_t d : dims) header.push_back("d=" + std::to_string(d));
      std::vector<std::vector<std::string>> rows;
      for (const auto& [model, s] : series) {
        std::vector<std::string> row{model};
        for (int64_t d : dims) {
          auto it = cells.find({lk.first, lk.second, model, d});
          if (it == cells.end()) {
            row.push_back("-");
            continue;
          }
          const MqarCell& c = it->second;
          row.push_back(format_number(c.accuracy, 3) + " (lr " + format_lr(c.best_lr) + ", " +
                        std::to_string(c.lrs.size()) + " lr, run " + std::to_string(c.best_run) + ")");
        }
        rows.push_back(std::move(row));
      }
      ctx.md << "**L = " << lk.first << ", N_KV = " << lk.second
             << "** — best test accuracy (best learning rate, learning rates tried, run id):\n\n";
      ctx.md << markdown_table(header, rows) << "\n";
    }
  }
  auto id_list = [](const std::vector<int64_t>& ids) {
    std::string s;
    for (int64_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
    return s;
  };
  if (!missing_keys.empty())
    ctx.md << "MQAR runs left out because their config lacks d_model, seq_len or num_kv_pairs: "
           << id_list(missing_keys) << ".\n\n";
  if (!no_accuracy.empty())
    ctx.md << "MQAR runs without any test accuracy yet: " << id_list(no_accuracy) << ".\n\n";
}

}  // namespace

void register_mqar_section() { register_report_section("mqar", 20, mqar_section); }

}  // namespace mnemo
