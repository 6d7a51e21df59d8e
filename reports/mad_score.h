// MAD score (docs/tasks.md#mad; external: athms/mad-lab mad/analysis.py): for every (model,
// task, difficulty setting) the best test accuracy over the lr x weight-decay runs; task score
// = mean over that task's settings; MAD score = mean over tasks. The Atlas-comparable average
// (docs/tasks.md#mad) is the mean of compression, noisy ICR, fuzzy ICR, selective copying and
// memorization.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "results/db.h"
#include "core/common.h"

namespace mnemo {

// One finished MAD training run, reduced to what the score needs.
struct MadRunResult {
  int64_t run_id = 0;
  std::string model;    // display label (family, plus width/depth when not MAD's 128 x 2)
  std::string task;     // "compression", ... (without the mad_ prefix)
  std::string setting;  // "baseline" or the changed variables, e.g. "vocab_size=32"
  json setting_params;  // the task parameters + n_train + n_test
  double lr = 0, weight_decay = 0;
  double accuracy = 0;  // in [0, 1]
};

struct MadSettingScore {
  double best = 0;  // max over the runs of this setting
  int64_t best_run = 0;
  double best_lr = 0, best_weight_decay = 0;
  int runs = 0;
};

struct MadTaskScore {
  double score = 0;  // mean over settings of the best accuracy
  std::map<std::string, MadSettingScore> settings;
};

struct MadModelScores {
  std::map<std::string, MadTaskScore> tasks;  // by task name
  double mad_score = 0;       // mean over the tasks present
  double atlas_average = 0;   // mean of the five Atlas columns; NaN unless all five present
  int tasks_present = 0;
};

// model label -> scores.
std::map<std::string, MadModelScores> compute_mad_scores(const std::vector<MadRunResult>& runs);

// "baseline" or "key=value, ..." for the keys that differ from the task's mad-lab baseline
// (task parameters and n_train); also used as the x-axis variable of the difficulty plots.
// `baseline`: the task's entry "baseline" of the report catalog (reports/report.h).
std::string mad_setting_label(const json& baseline, const json& setting_params);

// Which accuracy a run contributes (docs/tasks.md#mad): mad-lab reports the test accuracy of the
// checkpoint with the lowest test perplexity, i.e. the evaluation with the lowest test loss.
enum class MadSelection { lowest_test_loss, final, best };
struct MadRunsFromDb {
  std::vector<MadRunResult> runs;
  std::string accuracy_metric;       // "accuracy_macro" when logged (MAD-faithful), else "accuracy"
  std::vector<int64_t> skipped_runs;  // MAD runs without test metrics
};
// `catalog`: the report catalog (reports/report.h); a task missing from catalog["mad"] is skipped.
MadRunsFromDb mad_runs_from_db(ResultsDB& db, const json& catalog,
                               MadSelection selection = MadSelection::lowest_test_loss);
// "compression" from "mad_compression" (the run's task name without the prefix).
std::string mad_short_name(const std::string& task);

}  // namespace mnemo
