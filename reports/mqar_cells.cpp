#include "reports/mqar_cells.h"

#include <algorithm>
#include <cmath>

#include "reports/family_style.h"
#include "reports/report.h"

namespace mnemo {

namespace {

// run id -> best finite value of test metric `name` over the run's evaluations.
std::map<int64_t, double> best_per_run(const ResultsDB& db, const std::string& name) {
  std::map<int64_t, double> best;
  for (const MetricRow& m : db.metrics_named("test", name))
    if (std::isfinite(m.value)) {
      auto it = best.find(m.run_id);
      best[m.run_id] = it == best.end() ? m.value : std::max(it->second, m.value);
    }
  return best;
}

// The N_KV test slices of a run trained on Zoology's mixture (task parameter test_num_kv_pairs).
std::vector<int64_t> test_slices(const json& cfg) {
  std::vector<int64_t> out;
  auto it = cfg.find("test_num_kv_pairs");
  if (it != cfg.end() && it->is_array())
    for (const json& v : *it)
      if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  return out;
}

}  // namespace

MqarCells mqar_cells(const ResultsDB& db, const std::string& only_sweep) {
  const std::map<int64_t, double> best_acc = best_per_run(db, "accuracy");
  std::map<int64_t, std::map<int64_t, double>> best_slice;  // N_KV -> run id -> best accuracy_nkv<N>
  MqarCells out;
  for (const RunInfo& run : db.runs()) {
    if (run.task != "mqar" || (!only_sweep.empty() && run.sweep != only_sweep)) continue;
    json cfg = run_config(db, run);
    auto d = config_number(cfg, "d_model");
    auto L = config_number(cfg, "seq_len");
    auto nkv = config_number(cfg, "num_kv_pairs");
    std::vector<int64_t> slices = test_slices(cfg);
    if (!d || !L || (!nkv && slices.empty())) {
      out.missing_keys.push_back(run.id);
      continue;
    }
    // One cell per test slice (a mixture run), else one cell at the run's num_kv_pairs.
    std::vector<std::pair<int64_t, double>> results;  // (N_KV, best accuracy)
    if (slices.empty()) {
      auto acc = best_acc.find(run.id);
      if (acc != best_acc.end()) results.push_back({static_cast<int64_t>(*nkv), acc->second});
    } else {
      for (int64_t n : slices) {
        auto table = best_slice.find(n);
        if (table == best_slice.end())
          table = best_slice.emplace(n, best_per_run(db, "accuracy_nkv" + std::to_string(n))).first;
        auto acc = table->second.find(run.id);
        if (acc != table->second.end()) results.push_back({n, acc->second});
      }
    }
    if (results.empty()) {
      out.no_accuracy.push_back(run.id);
      continue;
    }
    const double lr = config_number(cfg, "lr").value_or(NAN);
    const int64_t V = static_cast<int64_t>(config_number(cfg, "vocab_size").value_or(8192));
    for (const auto& [n, accuracy] : results) {
      // Values are drawn from [V/2, V) (synthetic/mqar.cpp); V defaults to the task's 8192.
      out.vocab_sizes[{static_cast<int64_t>(*L), n}].insert(V);
      const MqarCellKey key{static_cast<int64_t>(*L), n, run_label(cfg, config_string(cfg, "model", run.model)),
                            static_cast<int64_t>(*d)};
      auto [it, fresh] = out.cells.try_emplace(key);
      MqarCell& c = it->second;
      ++c.runs;
      if (!std::isnan(lr)) c.lrs.insert(lr);
      if (fresh || accuracy > c.accuracy) {
        c.accuracy = accuracy;
        c.best_lr = lr;
        c.best_run = run.id;
      }
    }
  }
  return out;
}

}  // namespace mnemo
