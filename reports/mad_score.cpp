#include "reports/mad_score.h"

#include <cmath>
#include <set>

#include "reports/family_style.h"


namespace mnemo {

namespace {

const std::vector<std::string>& atlas_columns() {
  static const std::vector<std::string> c = {"compression", "noisy_in_context_recall", "fuzzy_in_context_recall",
                                             "selective_copying", "memorization"};
  return c;
}

}  // namespace

std::string mad_short_name(const std::string& task) { return task.rfind("mad_", 0) == 0 ? task.substr(4) : task; }

std::string mad_setting_label(const json& base, const json& params) {
  std::string label;
  for (auto it = base.begin(); it != base.end(); ++it) {
    if (!params.contains(it.key()) || params[it.key()] == it.value()) continue;
    label += (label.empty() ? "" : ", ") + it.key() + "=" + params[it.key()].dump();
  }
  return label.empty() ? "baseline" : label;
}

std::map<std::string, MadModelScores> compute_mad_scores(const std::vector<MadRunResult>& runs) {
  std::map<std::string, MadModelScores> out;
  for (const auto& r : runs) {
    if (!std::isfinite(r.accuracy)) continue;
    MadSettingScore& s = out[r.model].tasks[r.task].settings[r.setting];
    ++s.runs;
    if (s.runs == 1 || r.accuracy > s.best) {
      s.best = r.accuracy;
      s.best_run = r.run_id;
      s.best_lr = r.lr;
      s.best_weight_decay = r.weight_decay;
    }
  }
  for (auto& [model, m] : out) {
    double total = 0;
    for (auto& [task, ts] : m.tasks) {
      double sum = 0;
      for (const auto& [label, s] : ts.settings) sum += s.best;
      ts.score = sum / static_cast<double>(ts.settings.size());
      total += ts.score;
    }
    m.tasks_present = static_cast<int>(m.tasks.size());
    m.mad_score = m.tasks.empty() ? NAN : total / m.tasks_present;
    double atlas = 0;
    bool all = true;
    for (const auto& t : atlas_columns()) {
      auto it = m.tasks.find(t);
      if (it == m.tasks.end()) {
        all = false;
        break;
      }
      atlas += it->second.score;
    }
    m.atlas_average = all ? atlas / atlas_columns().size() : NAN;
  }
  return out;
}

MadRunsFromDb mad_runs_from_db(ResultsDB& db, const json& catalog, MadSelection selection) {
  MadRunsFromDb out;
  struct Pending {
    RunInfo run;
    json cfg;
    std::vector<MetricRow> metrics;
  };
  std::vector<Pending> pending;
  bool all_macro = true;
  for (const RunInfo& run : db.runs()) {
    if (run.task.rfind("mad_", 0) != 0 || run.status != "completed") continue;
    if (!catalog.contains("mad") || !catalog["mad"].contains(mad_short_name(run.task))) continue;
    json cfg;
    try {
      cfg = json::parse(run.config_json);
    } catch (const json::exception& e) {
      throw Error("results database " + db.path() + ": run " + std::to_string(run.id) + " has an invalid config: " +
                  e.what());
    }
    auto metrics = db.metrics(run.id);
    bool has_acc = false, has_macro = false;
    for (const auto& m : metrics) {
      if (m.split != "test") continue;
      has_acc = has_acc || m.name == "accuracy";
      has_macro = has_macro || m.name == "accuracy_macro";
    }
    if (!has_acc && !has_macro) {
      out.skipped_runs.push_back(run.id);
      continue;
    }
    all_macro = all_macro && has_macro;
    pending.push_back({run, cfg, std::move(metrics)});
  }
  out.accuracy_metric = (all_macro && !pending.empty()) ? "accuracy_macro" : "accuracy";

  for (const auto& p : pending) {
    std::map<int64_t, double> acc, loss;
    for (const auto& m : p.metrics) {
      if (m.split != "test" || !std::isfinite(m.value)) continue;
      if (m.name == out.accuracy_metric) acc[m.step] = m.value;
      if (m.name == "loss") loss[m.step] = m.value;
    }
    if (acc.empty()) {
      out.skipped_runs.push_back(p.run.id);
      continue;
    }
    double value = acc.rbegin()->second;  // final
    if (selection == MadSelection::best) {
      for (const auto& [step, a] : acc) value = std::max(value, a);
    } else if (selection == MadSelection::lowest_test_loss && !loss.empty()) {
      int64_t best_step = loss.begin()->first;
      for (const auto& [step, l] : loss)
        if (l < loss[best_step]) best_step = step;  // strictly lower: the earliest minimum
      auto it = acc.find(best_step);
      if (it != acc.end()) value = it->second;
    }
    MadRunResult r;
    r.run_id = p.run.id;
    r.task = mad_short_name(p.run.task);
    const json& base = catalog["mad"][r.task]["baseline"];
    r.setting_params = json::object();
    for (auto it = base.begin(); it != base.end(); ++it)
      r.setting_params[it.key()] = p.cfg.contains(it.key()) ? p.cfg[it.key()] : it.value();
    r.setting = mad_setting_label(base, r.setting_params);
    const int64_t d = p.cfg.value("d_model", int64_t{128}), layers = p.cfg.value("n_layers", int64_t{2});
    std::vector<std::string> shape;
    if (d != 128 || layers != 2) shape.push_back("d=" + std::to_string(d) + ", " + std::to_string(layers) + " layers");
    r.model = run_label(p.cfg, p.cfg.value("model", p.run.model), shape);
    r.lr = p.cfg.value("lr", std::nan(""));
    r.weight_decay = p.cfg.value("weight_decay", std::nan(""));
    r.accuracy = value;
    out.runs.push_back(std::move(r));
  }
  return out;
}

}  // namespace mnemo
