#include "engine/evaluation/evaluate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "engine/io/checkpoint.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/config/run_config.h"
#include "engine/evaluation/harness_eval.h"
#include "results/db.h"
#include "runtime/device.h"
#include "tasks/eval_task.h"
#include "tasks/lm_task.h"
#include "tasks/task.h"
#include "tasks/generation_evaluation.h"
#include "tasks/token_evaluation.h"
#include "tasks/token_shard.h"

namespace mnemo {

json evaluate_on_driver(std::unique_ptr<harness::HarnessTask> evaluation, const Tokenizer* tok, EvalContext& ctx,
                        int64_t batch_size) {
  const std::string task_name = evaluation->name();
  const auto specs = evaluation->metrics();
  HarnessOptions o;
  o.tasks = {task_name};
  o.make_task = [&](const std::string&) { return std::move(evaluation); };
  o.device = ctx.device.str();
  o.batch_size = batch_size;
  // One entry per setting: the setting, "value" (the first metric's), "n" and, for a task of several metrics, each by
  // name.
  json cells = json::array();
  std::map<std::string, size_t> by_setting;
  o.record = [&](const std::vector<EvalCell>& rows) {
    for (const EvalCell& row : rows) {
      if (std::none_of(specs.begin(), specs.end(), [&](const harness::MetricSpec& s) { return s.name == row.metric; }))
        continue;  // a row beside the metrics (lm_ppl's per-bucket perplexity): in the database only
      const auto [it, added] = by_setting.emplace(row.setting.dump(), cells.size());
      if (added) {
        json summary = row.setting;
        summary["value"] = row.value;
        summary["n"] = row.n;
        cells.push_back(std::move(summary));
      }
      if (specs.size() > 1) cells[it->second][row.metric] = row.value;
    }
    record_cells(ctx, rows);
  };
  run_harness(&ctx.model, tok, o, ctx.log);
  return {{"task", task_name}, {"metric", specs.front().name}, {"cells", cells}};
}

json evaluate_generation_task(const GenerationTask& task, EvalContext& ctx) {
  auto evaluation = std::make_unique<GenerationTaskEvaluation>(task, ctx);  // every cell's samples and requests
  const std::shared_ptr<Tokenizer> tok = evaluation->own_tokenizer();
  json out = evaluate_on_driver(std::move(evaluation), tok.get(), ctx, 1);
  out["tokenizer"] = tok->id();
  return out;
}

json evaluate_checkpoint(const EvalRequest& a, const std::function<void(const std::string&)>& log) {
  // A --db that exists but is not mnemo's is refused (by ResultsDB) before the model is loaded and evaluated.
  if (std::error_code ec; !a.db.empty() && std::filesystem::exists(a.db, ec)) ResultsDB{a.db};
  json ckpt_cfg = load_checkpoint_config(a.checkpoint);
  const std::string task_name = a.task.empty() ? ckpt_cfg.at("task").get<std::string>() : a.task;
  json params = a.params;
  // Generation tasks (S-NIAH, BABILong) take evaluation options (lengths, depths, ...) beside
  // their task parameters: a flag that is not a task parameter but one of the task's evaluation
  // options goes to the options.
  json eval_options = json::object();
  {
    auto probe = TaskRegistry::instance().make(task_name, json::object());
    if (auto* ev = dynamic_cast<EvalTask*>(probe.get())) {
      const json help = ev->eval_options_help(), task_params = probe->params();
      for (auto it = help.begin(); it != help.end(); ++it)
        if (params.contains(it.key()) && !task_params.contains(it.key())) {
          eval_options[it.key()] = params[it.key()];
          params.erase(it.key());
        }
      if (a.n_given) eval_options["n"] = a.n;
      if (a.seed_given) eval_options["seed"] = a.seed;
    }
  }
  // Unless overridden, a task keeps the parameters the model was trained with.
  params = checkpoint_task_params(task_name, ckpt_cfg, params);
  // --tokenizer against the one the checkpoint records (checkpoint_tokenizer): refused where it differs, unless
  // --allow-other-tokenizer, and then named in the rows' cell.
  json setting_extra = json::object();
  if (a.params.contains("tokenizer") && a.params["tokenizer"].is_string()) {
    const auto tok = checkpoint_tokenizer(ckpt_cfg, a.params["tokenizer"].get<std::string>(), a.checkpoint,
                                          a.allow_other_tokenizer, log);
    if (tok.other) setting_extra["tokenizer"] = tok.tokenizer->id();
  }
  auto task = TaskRegistry::instance().make(task_name, params);
  const torch::Device device = resolve_device(a.device);
  Backbone model = load_backbone(a.checkpoint, device);
  if (auto* ev = dynamic_cast<EvalTask*>(task.get())) {
    if (!model.language_model)
      throw Error("task '" + task_name + "' evaluates a language model, but the checkpoint holds a " + model.kind);
    LanguageModelAdapter adapter(*model.language_model, device);
    EvalContext ctx(adapter);
    ctx.options = eval_options;
    const std::string model_name = ckpt_cfg.value("model", ""), checkpoint = resolve_model_path(a.checkpoint);
    // The database is opened (and created) only to record the finished evaluation: a failure before leaves none.
    int64_t run_id = 0;
    ctx.record = [&](const std::vector<EvalCell>& cells) {
      ResultsDB db(a.db);
      run_id = checkpoint_run_id(db, a.checkpoint);
      eval_rows_sink(db, model_name, checkpoint, run_id, a.keep_previous, setting_extra)(cells);
    };
    ctx.log = log;
    auto evaluation = ev->evaluation(ctx, task);
    // The tokenizer the evaluation reads text with (a generation task's prompts; lm_ppl's validation stream).
    const std::shared_ptr<Tokenizer> tok = evaluation->own_tokenizer();
    const int64_t batch = option_int(eval_options, "batch_size", 1);
    json out = evaluate_on_driver(std::move(evaluation), tok.get(), ctx, batch);
    if (tok) out["tokenizer"] = tok->id();
    out["model"] = model_name;
    out["run_id"] = run_id;
    return out;
  }
  // A token task: its test examples through the evaluation driver (token_predictions requests), the cells into the
  // database; the result keeps its metrics by name.
  auto token_task = std::dynamic_pointer_cast<TokenTask>(task);
  if (!token_task) throw Error("task '" + task_name + "' has no evaluation on a checkpoint");
  const uint64_t seed = a.seed_given ? a.seed : ckpt_cfg.value("seed", uint64_t{0});
  HarnessOptions o;
  o.tasks = {task_name};
  o.make_task = [&](const std::string&) { return std::make_unique<TokenTaskEvaluation>(token_task, a.n, seed); };
  o.token_batch_size = a.batch_size;
  o.model_name = ckpt_cfg.value("model", "");
  o.checkpoint = resolve_model_path(a.checkpoint);
  o.device = device.str();
  json metrics = json::object();
  int64_t run_id = 0;
  o.record = [&](const std::vector<EvalCell>& cells) {
    for (const EvalCell& c : cells) {
      metrics[c.metric] = c.value;
      metrics["n"] = c.n;
    }
    ResultsDB db(a.db);
    run_id = checkpoint_run_id(db, a.checkpoint);
    eval_rows_sink(db, o.model_name, o.checkpoint, run_id, a.keep_previous, setting_extra)(cells);
  };
  BackboneAdapter adapter(model, device);
  run_harness(&adapter, nullptr, o, log);
  return {{"task", task_name}, {"params", task->params()}, {"model", o.model_name}, {"run_id", run_id},
          {"metrics", metrics}};
}

}  // namespace mnemo
