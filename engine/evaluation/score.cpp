#include "engine/evaluation/score.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tasks/eval_task.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/scoring.h"
#include "tasks/task.h"
#include "tasks/text_utils.h"

namespace mnemo {

json score_predictions(const std::string& task_name, const std::string& path, const std::string& mode) {
  const auto lm_eval_tasks = harness::harness_task_names();
  if (std::find(lm_eval_tasks.begin(), lm_eval_tasks.end(), task_name) != lm_eval_tasks.end())
    throw Error("score: '" + task_name + "' is an lm-eval task: re-score its samples file with --samples "
                "samples_" + task_name + ".jsonl (from mnemo eval --tasks " + task_name + " --log-samples)");
  auto task = TaskRegistry::instance().make(task_name, json::object());
  const auto* scorer = dynamic_cast<const EvalTask*>(task.get());
  if (!scorer) {
    std::string with;
    for (const auto& n : TaskRegistry::instance().names())
      if (dynamic_cast<const EvalTask*>(TaskRegistry::instance().make(n, json::object()).get()))
        with += (with.empty() ? "" : ", ") + n;
    throw Error("score: task '" + task_name + "' has no text scorer (tasks with one: " + with + ")");
  }
  if (std::filesystem::is_directory(path)) throw Error("score: predictions file '" + path + "' is a directory");
  std::ifstream in(path);
  if (!in) throw Error("score: cannot read predictions file '" + path + "'");
  std::vector<double> scores;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (strip(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json row;
    try {
      row = parse_json_text(line, "");
    } catch (const Error& e) {  // parse error, duplicate key, or a number beyond a double
      throw Error(where + ": not valid JSON: " + e.what());
    }
    if (!row.is_object()) throw Error(where + ": expected a JSON object");
    scores.push_back(scorer->score_prediction(row, mode, where));
  }
  if (scores.empty()) throw Error("score: '" + path + "' holds no predictions");
  json out = {{"task", task_name},
              {"n", static_cast<int64_t>(scores.size())},
              {"value", mean_percent(scores)},
              {"metric", scorer->score_metric(mode)}};
  if (scorer->score_metric("strict") != scorer->score_metric("substring")) out["mode"] = mode;  // mode-dependent scorer
  return out;
}

}  // namespace mnemo
