// `mnemo eval --checkpoint DIR --task NAME [--param value ...] [--n N] [--seed S] [--db FILE]`
#include <iostream>

#include "cli/commands/commands.h"
#include "results/db.h"
#include "runtime/checkpoint.h"
#include "runtime/config.h"
#include "runtime/token_eval.h"
#include "runtime/trainer.h"
#include "tasks/eval_task.h"
#include "tasks/task.h"

namespace mnemo::cli {

namespace {
struct EvalArgs {
  std::string checkpoint, task, db = "results/mnemo.sqlite", device = "auto";
  int64_t n = 1000, batch_size = 64;
  uint64_t seed = 0;
  bool seed_given = false;
};

// Token tasks: loss and per-example accuracy on fresh test examples.
json eval_token_task(LanguageModel& model, TokenTask& task, const json& ckpt_cfg, const EvalArgs& a,
                     const torch::Device& device) {
  if (task.vocab_size() > model->config().vocab_size)
    throw Error("task vocab_size " + std::to_string(task.vocab_size()) + " exceeds the model's " +
                std::to_string(model->config().vocab_size));
  const uint64_t seed = a.seed_given ? a.seed : ckpt_cfg.value("seed", uint64_t{0});
  auto examples = task.examples(Split::test, a.n, seed);
  auto r = evaluate_tokens(*model, examples, a.batch_size, device);
  return {{"accuracy", r.accuracy}, {"loss", r.loss}, {"n", r.n_examples}};
}
}  // namespace

void add_eval_command(CLI::App& app) {
  static EvalArgs a;
  auto* sub = app.add_subcommand("eval",
                                 "Evaluate a checkpoint on a task; task parameters and evaluation options are "
                                 "flags (e.g. --seq-len 128 --num-kv-pairs 8; S-NIAH: --lengths 1024,2048 "
                                 "--depths 0,50,100)");
  sub->add_option("--checkpoint", a.checkpoint, "Run directory or its checkpoint/ folder")->required();
  sub->add_option("--task", a.task, "Task name (default: the task the model was trained on)");
  auto* n_opt = sub->add_option("--n", a.n, "Examples to evaluate (generation tasks: samples per cell)")
                    ->check(CLI::PositiveNumber);
  auto* seed_opt = sub->add_option("--seed", a.seed, "Base seed of the test examples (default: the run's)");
  sub->add_option("--batch-size", a.batch_size, "Evaluation batch size")->check(CLI::PositiveNumber);
  sub->add_option("--db", a.db, "Results database (default results/mnemo.sqlite)");
  sub->add_option("--device", a.device, "cpu | cuda | auto");
  sub->allow_extras();
  sub->callback([sub, seed_opt, n_opt] {
    a.seed_given = seed_opt->count() > 0;
    json ckpt_cfg = load_checkpoint_config(a.checkpoint);
    const std::string task_name = a.task.empty() ? ckpt_cfg.at("task").get<std::string>() : a.task;
    json params = extras_to_params(sub->remaining());
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
        if (n_opt->count() > 0) eval_options["n"] = a.n;
        if (a.seed_given) eval_options["seed"] = a.seed;
      }
    }
    // Unless overridden, a task keeps the parameters the model was trained with.
    if (task_name == ckpt_cfg.value("task", "")) {
      json trained = task_params_of(resolve_run_config(ckpt_cfg));
      trained.update(params);
      params = trained;
    }
    auto task = TaskRegistry::instance().make(task_name, params);
    const torch::Device device = resolve_device(a.device);
    auto model = load_model(a.checkpoint, device);
    if (auto* ev = dynamic_cast<EvalTask*>(task.get())) {
      ResultsDB db(a.db);
      EvalContext ctx(*model);
      ctx.device = device;
      ctx.options = eval_options;
      ctx.db = &db;
      ctx.model_name = ckpt_cfg.value("model", "");
      ctx.checkpoint = resolve_checkpoint_path(a.checkpoint);
      ctx.log = [](const std::string& line) { std::cerr << line << "\n"; };
      json out = ev->evaluate(ctx);
      out["model"] = ctx.model_name;
      std::cout << out.dump() << "\n";
      return;
    }
    json metrics;
    if (auto* tt = dynamic_cast<TokenTask*>(task.get())) {
      metrics = eval_token_task(model, *tt, ckpt_cfg, a, device);
    } else {
      throw Error("task '" + task_name + "' has no evaluation on a checkpoint");
    }
    ResultsDB db(a.db);
    std::vector<EvalRow> rows;
    for (const char* m : {"accuracy", "loss"}) {
      if (!metrics.contains(m)) continue;
      EvalRow r;
      r.model = ckpt_cfg.value("model", "");
      r.task = task_name;
      r.metric = m;
      r.setting_json = task->params().dump();
      r.checkpoint = resolve_checkpoint_path(a.checkpoint);
      r.value = metrics[m].get<double>();
      r.n = metrics.value("n", int64_t{0});
      rows.push_back(r);
    }
    db.add_evals(rows);
    json out = {{"task", task_name}, {"params", task->params()}, {"model", ckpt_cfg.value("model", "")},
                {"metrics", metrics}};
    std::cout << out.dump() << "\n";
  });
}

}  // namespace mnemo::cli
