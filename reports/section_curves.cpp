// Training curves per task: test accuracy, test loss and train loss vs step, one line per run
// (labelled by model, d_model, lr). Tasks with several sequence lengths get one figure per
// length. At most 8 lines a panel: figures with more runs keep each (model, d_model)'s best run,
// then each model's best run, and beyond 8 models draw one row of panels per model group. Loss
// panels whose values span more than a decade get a log y axis.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "reports/family_style.h"
#include "reports/small_multiples.h"
#include "reports/report.h"

namespace mnemo {

namespace {

constexpr size_t kMaxLines = 8;  // lines per panel

struct RunCurves {
  RunInfo run;
  json config;
  std::string label, group, model;  // group: model + d_model (lr sweep members share it)
  Series test_acc, test_loss, train_loss;
  double best_acc = -INFINITY;
};

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string file_stem(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The best run of each key (highest test accuracy; ties and runs without accuracy: the latest).
template <class KeyFn>
std::vector<RunCurves> best_runs(const std::vector<RunCurves>& runs, KeyFn key) {
  std::map<std::string, size_t> keep;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto it = keep.find(key(runs[i]));
    if (it == keep.end() || runs[i].best_acc > runs[it->second].best_acc ||
        (runs[i].best_acc == runs[it->second].best_acc && runs[i].run.id > runs[it->second].run.id))
      keep[key(runs[i])] = i;
  }
  std::vector<RunCurves> kept;
  for (auto& [k, i] : keep) kept.push_back(runs[i]);
  return kept;
}

// Positive values over more than a decade (max / min > 10).
bool spans_a_decade(const Panel& p) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : p.series)
    for (double y : s.y)
      if (std::isfinite(y) && y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
  return std::isfinite(lo) && hi / lo > 10;
}

void curves_section(ReportContext& ctx) {
  // task -> seq_len (or -1) -> runs
  std::map<std::string, std::map<int64_t, std::vector<RunCurves>>> by_task;
  for (const RunInfo& run : ctx.db.runs()) {
    RunCurves rc;
    rc.run = run;
    rc.config = run_config(ctx.db, run);
    for (const MetricRow& m : ctx.db.metrics(run.id)) {
      if (!std::isfinite(m.value)) continue;
      Series* s = nullptr;
      if (m.split == "test" && m.name == "accuracy") {
        s = &rc.test_acc;
        rc.best_acc = std::max(rc.best_acc, m.value);
      } else if (m.split == "test" && m.name == "loss") {
        s = &rc.test_loss;
      } else if (m.split == "train" && m.name == "loss") {
        s = &rc.train_loss;
      }
      if (s) {
        s->x.push_back(static_cast<double>(m.step));
        s->y.push_back(m.value);
      }
    }
    if (rc.test_acc.x.empty() && rc.test_loss.x.empty() && rc.train_loss.x.empty()) continue;
    std::string model = run_label(rc.config, config_string(rc.config, "model", run.model));
    auto d = config_number(rc.config, "d_model");
    auto lr = config_number(rc.config, "lr");
    rc.group = model + (d ? " d=" + std::to_string(static_cast<int64_t>(*d)) : "");
    rc.label = rc.group + (lr ? " lr=" + short_number(*lr) : "") + " (#" + std::to_string(run.id) + ")";
    rc.model = model;
    rc.test_acc.label = rc.test_loss.label = rc.train_loss.label = rc.label;
    rc.test_acc.family = rc.test_loss.family = rc.train_loss.family = model;
    int64_t L = static_cast<int64_t>(config_number(rc.config, "seq_len").value_or(-1));
    by_task[run.task][L].push_back(std::move(rc));
  }
  if (by_task.empty()) return;

  ctx.md << "## Training curves\n\n";
  ctx.md << "Per task: test accuracy, test loss and train loss against the optimiser step, one "
            "line per run (model, d_model, learning rate, run id); at most 8 lines a panel (more runs: the best "
            "run of each model, one row of panels per model group); loss panels spanning more than a decade "
            "on a log scale.\n\n";
  for (auto& [task, by_len] : by_task) {
    bool several_lengths = by_len.size() > 1;
    for (auto& [L, runs] : by_len) {
      std::string note;
      const size_t all_runs = runs.size();
      if (runs.size() > kMaxLines) {
        runs = best_runs(runs, [](const RunCurves& r) { return r.group; });
        note = "each (model, d_model)'s best run";
      }
      if (runs.size() > kMaxLines) {
        runs = best_runs(runs, [](const RunCurves& r) { return r.model; });
        note = "each model's best run";
      }
      if (!note.empty())
        note = "Showing " + note + " (highest test accuracy, else the latest): " + std::to_string(runs.size()) +
               " of " + std::to_string(all_runs) + " runs.";
      LinePlot plot;
      std::string what = task + (several_lengths && L >= 0 ? " (L = " + std::to_string(L) + ")" : "");
      plot.name = "curves_" + file_stem(task) + (several_lengths && L >= 0 ? "_L" + std::to_string(L) : "");
      plot.title = "Training curves: " + what;
      plot.xlabel = "step";
      plot.points = false;
      plot.columns = 3;
      plot.share_y_by_column = true;
      // Each panel's y axis is named by its metric (the panels of a row show different quantities).
      Panel acc{"test accuracy", {}, 0, "", "test accuracy"}, test_loss{"test loss", {}, -1, "", "test loss (nats/token)"},
          train_loss{"train loss", {}, -1, "", "train loss (nats/token)"};
      for (const RunCurves& rc : runs) {
        if (!rc.test_acc.x.empty()) acc.series.push_back(rc.test_acc);
        if (!rc.test_loss.x.empty()) test_loss.series.push_back(rc.test_loss);
        if (!rc.train_loss.x.empty()) train_loss.series.push_back(rc.train_loss);
      }
      for (Panel* p : {&test_loss, &train_loss}) p->log_y = spans_a_decade(*p) ? 10 : 0;
      for (Panel* p : {&acc, &test_loss, &train_loss})
        if (!p->series.empty()) plot.panels.push_back(*p);
      plot.columns = static_cast<int>(plot.panels.size());
      split_panels_by_group(plot, kMaxLines);
      ctx.md << "### " << what << "\n\n";
      if (!note.empty()) ctx.md << note << "\n\n";
      ctx.add_figure(plot_lines(plot, ctx.figure_dir), "Training curves for " + what);
    }
  }
}

}  // namespace

void register_curves_section() { register_report_section("training_curves", 60, curves_section); }

}  // namespace mnemo
