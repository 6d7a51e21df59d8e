#include "engine/evaluation/evaluate.h"

#include <cmath>
#include <filesystem>

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

json evaluate_generation_task(const GenerationTask& task, EvalContext& ctx) {
  auto evaluation = std::make_unique<GenerationTaskEvaluation>(task, ctx);  // every cell's samples and requests
  const std::shared_ptr<Tokenizer> tok = evaluation->tokenizer();
  const std::string task_name = evaluation->name(), metric = evaluation->metrics().front().name;
  HarnessOptions o;
  o.tasks = {task_name};
  o.make_task = [&](const std::string&) { return std::move(evaluation); };
  o.device = ctx.device.str();
  json cells = json::array();
  o.record = [&](const std::vector<EvalCell>& rows) {
    for (const EvalCell& row : rows) {
      json summary = row.setting;
      summary["value"] = row.value;
      summary["n"] = row.n;
      cells.push_back(std::move(summary));
    }
    record_cells(ctx, rows);
  };
  run_harness(&ctx.model, tok.get(), o, ctx.log);
  return {{"task", task_name}, {"metric", metric}, {"tokenizer", tok->id()}, {"cells", cells}};
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
  // lm_ppl on an `lm` checkpoint: the same corpus, tokenizer and context unless overridden.
  if (task_name == ckpt_cfg.value("task", "") || (task_name == "lm_ppl" && ckpt_cfg.value("task", "") == "lm")) {
    json trained = task_params_of(resolve_run_config(ckpt_cfg));
    trained.update(params);
    params = trained;
  }
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
    auto* generation = dynamic_cast<GenerationTask*>(ev);
    auto* direct = dynamic_cast<DirectEvalTask*>(ev);
    if (!generation && !direct) throw Error("task '" + task_name + "' has no evaluation on a checkpoint");
    if (!model.language_model)
      throw Error("task '" + task_name + "' generates text, but the checkpoint holds a " + model.kind);
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
    json out = generation ? evaluate_generation_task(*generation, ctx) : direct->evaluate(ctx);
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
