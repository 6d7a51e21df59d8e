#include "reports/mqar_cells.h"

#include <cmath>

#include "reports/report.h"

namespace mnemo {

MqarCells mqar_cells(const ResultsDB& db, const std::string& only_sweep) {
  std::map<int64_t, double> best_acc;  // run id -> best test accuracy over its evaluations
  for (const MetricRow& m : db.metrics_named("test", "accuracy"))
    if (std::isfinite(m.value)) {
      auto it = best_acc.find(m.run_id);
      best_acc[m.run_id] = it == best_acc.end() ? m.value : std::max(it->second, m.value);
    }
  MqarCells out;
  for (const RunInfo& run : db.runs()) {
    if (run.task != "mqar" || (!only_sweep.empty() && run.sweep != only_sweep)) continue;
    json cfg = run_config(db, run);
    auto d = config_number(cfg, "d_model");
    auto L = config_number(cfg, "seq_len");
    auto nkv = config_number(cfg, "num_kv_pairs");
    if (!d || !L || !nkv) {
      out.missing_keys.push_back(run.id);
      continue;
    }
    auto acc = best_acc.find(run.id);
    if (acc == best_acc.end()) {
      out.no_accuracy.push_back(run.id);
      continue;
    }
    const double lr = config_number(cfg, "lr").value_or(NAN);
    const MqarCellKey key{static_cast<int64_t>(*L), static_cast<int64_t>(*nkv), config_string(cfg, "model", run.model),
                          static_cast<int64_t>(*d)};
    auto [it, fresh] = out.cells.try_emplace(key);
    MqarCell& c = it->second;
    ++c.runs;
    if (!std::isnan(lr)) c.lrs.insert(lr);
    if (fresh || acc->second > c.accuracy) {
      c.accuracy = acc->second;
      c.best_lr = lr;
      c.best_run = run.id;
    }
  }
  return out;
}

}  // namespace mnemo
