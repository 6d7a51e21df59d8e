// `mnemo score --task TASK --predictions FILE.jsonl [--mode strict|substring]`: score predictions
// produced elsewhere with the task's own scorer (tasks/scoring.h) and print the metric as JSON.
// Each line: {"prediction": ..., <the target fields `mnemo generate` writes>}:
//   sniah_*        "outputs" (list of references) or "target"      -> string_match_all
//   babilong_qa*   "target" and "question"                          -> label-set accuracy (strict)
//                                                                      or substring accuracy
#include <fstream>
#include <iostream>

#include "cli/commands/commands.h"
#include "tasks/babilong.h"
#include "tasks/scoring.h"

namespace mnemo::cli {

namespace {
struct ScoreArgs {
  std::string task, predictions, mode = "strict";
};

std::string field_string(const json& row, const std::string& key, const std::string& where) {
  if (!row.contains(key)) throw Error(where + ": missing field \"" + key + "\"");
  if (!row[key].is_string()) throw Error(where + ": field \"" + key + "\" must be a string, got " + row[key].dump());
  return row[key].get<std::string>();
}

std::vector<std::string> sniah_references(const json& row, const std::string& where) {
  const char* key = row.contains("outputs") ? "outputs" : "target";
  if (!row.contains(key)) throw Error(where + ": missing field \"outputs\" (or \"target\")");
  const json& v = row[key];
  std::vector<std::string> refs;
  if (v.is_string()) {
    refs.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& r : v) {
      if (!r.is_string()) throw Error(where + ": field \"" + key + "\" must hold strings, got " + r.dump());
      refs.push_back(r.get<std::string>());
    }
  }
  if (refs.empty()) throw Error(where + ": field \"" + key + "\" must be a string or a non-empty list of strings");
  return refs;
}

json score_file(const ScoreArgs& a) {
  const bool sniah = a.task == "sniah_1" || a.task == "sniah_2" || a.task == "sniah_3";
  int babilong_task = 0;
  if (a.task.rfind("babilong_qa", 0) == 0) {
    try {
      babilong_task = std::stoi(a.task.substr(11));
    } catch (const std::exception&) {
      babilong_task = 0;
    }
    if (babilong_task < 1 || babilong_task > 20 || a.task != "babilong_qa" + std::to_string(babilong_task))
      throw Error("score: unknown task '" + a.task + "' (babilong_qa1..babilong_qa20)");
  }
  if (!sniah && !babilong_task)
    throw Error("score: task '" + a.task + "' has no text scorer (supported: sniah_1|2|3, babilong_qa1..qa20)");
  if (a.mode != "strict" && a.mode != "substring")
    throw Error("score: --mode must be strict or substring, got '" + a.mode + "'");

  std::ifstream in(a.predictions);
  if (!in) throw Error("score: cannot read predictions file '" + a.predictions + "'");
  std::vector<double> scores;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (strip(line).empty()) continue;
    const std::string where = a.predictions + ":" + std::to_string(line_no);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::parse_error& e) {
      throw Error(where + ": not valid JSON: " + e.what());
    }
    if (!row.is_object()) throw Error(where + ": expected a JSON object");
    const std::string pred = field_string(row, "prediction", where);
    if (sniah) {
      scores.push_back(string_match_all(ruler_postprocess(pred), sniah_references(row, where)));
    } else {
      scores.push_back(babilong_score(babilong_task, a.mode, pred, field_string(row, "target", where),
                                      field_string(row, "question", where)));
    }
  }
  if (scores.empty()) throw Error("score: '" + a.predictions + "' holds no predictions");
  json out = {{"task", a.task}, {"n", static_cast<int64_t>(scores.size())}, {"value", mean_percent(scores)}};
  if (sniah) {
    out["metric"] = "string_match_all";
  } else {
    out["metric"] = a.mode == "strict" ? "accuracy" : "substring_accuracy";
    out["mode"] = a.mode;
  }
  return out;
}
}  // namespace

void add_score_command(CLI::App& app) {
  static ScoreArgs a;
  auto* sub = app.add_subcommand("score", "Score predictions (JSONL with \"prediction\" and the generated target "
                                          "fields) with a task's scorer; prints the metric as JSON");
  sub->add_option("--task", a.task, "sniah_1|sniah_2|sniah_3|babilong_qa1..babilong_qa20")->required();
  sub->add_option("--predictions", a.predictions, "JSONL file, one prediction per line")->required();
  sub->add_option("--mode", a.mode, "BABILong scorer: strict (label sets, default) | substring");
  sub->callback([] { std::cout << score_file(a).dump() << "\n"; });
}

}  // namespace mnemo::cli
