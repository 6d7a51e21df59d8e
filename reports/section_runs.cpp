// Table of every training run: configuration, progress and headline numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reports/family_style.h"
#include "reports/report.h"

namespace mnemo {

namespace {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return "n/a";
  char buf[32];
  if (seconds < 120)
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else if (seconds < 7200)
    std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  else
    std::snprintf(buf, sizeof buf, "%.2f h", seconds / 3600);
  return buf;
}

std::string format_config_int(const json& cfg, const std::string& key) {
  auto v = config_number(cfg, key);
  return v ? std::to_string(static_cast<int64_t>(*v)) : std::string("-");
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void runs_section(ReportContext& ctx) {
  auto runs = ctx.db.runs();
  if (runs.empty()) return;
  std::vector<std::vector<std::string>> rows;
  std::vector<const RunInfo*> failed;
  for (const RunInfo& run : runs) {
    json cfg = run_config(ctx.db, run);
    double best_acc = NAN, final_loss = NAN, wall = NAN, summary_tps = NAN, summary_wall = NAN;
    int64_t final_loss_step = -1;
    std::vector<double> throughput;
    for (const MetricRow& m : ctx.db.metrics(run.id)) {
      if (std::isfinite(m.wall_time)) wall = std::isnan(wall) ? m.wall_time : std::max(wall, m.wall_time);
      if (!std::isfinite(m.value)) continue;
      if (m.split == "test" && m.name == "accuracy")
        best_acc = std::isnan(best_acc) ? m.value : std::max(best_acc, m.value);
      else if (m.split == "train" && m.name == "loss" && m.step >= final_loss_step)
        final_loss = m.value, final_loss_step = m.step;
      else if (m.split == "train" && m.name == "tokens_per_s")
        throughput.push_back(m.value);
      else if (m.split == "summary" && m.name == "tokens_per_s")
        summary_tps = m.value;
      else if (m.split == "summary" && m.name == "wall_s")
        summary_wall = m.value;
    }
    // The trainer's end-of-run summary (optimiser steps only) wins over the logged samples.
    double tps = std::isnan(summary_tps) ? median(throughput) : summary_tps;
    if (!std::isnan(summary_wall)) wall = summary_wall;
    auto lr = config_number(cfg, "lr");
    char lr_text[32] = "-";
    if (lr) std::snprintf(lr_text, sizeof lr_text, "%.3g", *lr);
    rows.push_back({std::to_string(run.id), ctx.db.observed_status(run),
                    run_label(cfg, config_string(cfg, "model", run.model)), run.task, format_config_int(cfg, "d_model"), format_config_int(cfg, "n_layers"),
                    lr_text, std::to_string(run.last_step), format_number(best_acc, 3),
                    format_number(final_loss, 3), format_count(tps),
                    format_duration(wall), run.n_params > 0 ? format_count(double(run.n_params)) : "n/a"});
    if (run.status == "failed") failed.push_back(&run);
  }
  ctx.md << "## All runs\n\n";
  ctx.md << "Best test acc = maximum `test/accuracy` over the run's evaluations; final train loss "
            "= `train/loss` at the last logged step; tokens/s = the run summary's training throughput "
            "(optimiser steps only), else the median logged throughput; wall time = the summary's "
            "wall time, else the last logged wall-clock time.\n\n";
  ctx.md << markdown_table({"id", "status", "model", "task", "d_model", "n_layers", "lr", "steps",
                            "best test acc", "final train loss", "tokens/s", "wall time", "params"},
                           rows)
         << "\n";
  if (!failed.empty()) {
    ctx.md << "Failed runs:\n\n";
    for (const RunInfo* r : failed)
      ctx.md << "- run " << r->id << " (" << r->model << ", " << r->task << "): "
             << (r->message.empty() ? "no message" : r->message) << "\n";
    ctx.md << "\n";
  }
}

}  // namespace

void register_runs_section() { register_report_section("runs", 80, runs_section); }

}  // namespace mnemo
