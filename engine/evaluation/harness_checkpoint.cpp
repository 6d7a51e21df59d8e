// `mnemo eval --tasks` on a checkpoint (engine/evaluation/harness_eval.h): what the task names mean (lm-eval tasks and
// groups, the registry's token and generation tasks), the model, tokenizer and defaults the evaluation loads, where its
// files go and which run its rows belong to; the driver itself is run_harness (harness_eval.cpp).
#include <algorithm>
#include <filesystem>

#include "engine/config/run_config.h"
#include "engine/evaluation/checkpoint_eval.h"
#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/io/checkpoint.h"
#include "results/db.h"
#include "runtime/device.h"
#include "tasks/generation_evaluation.h"
#include "tasks/harness/task_registry.h"
#include "tasks/token_evaluation.h"

namespace mnemo {

namespace fs = std::filesystem;

std::string default_harness_output_path(const std::string& checkpoint) {
  if (checkpoint.empty()) return "out/eval/requests";
  fs::path p = fs::path(resolve_model_path(checkpoint)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.extension() == ".safetensors" && p.has_parent_path()) {  // an export: RUN/export/model.safetensors -> RUN
    p = p.parent_path();
    if (p.filename() == "export" && p.has_parent_path()) p = p.parent_path();
  }
  if (p.filename().string().rfind("checkpoint", 0) == 0 && p.has_parent_path()) p = p.parent_path();
  fs::path name = p.filename();
  // A Hugging Face cache snapshot, <cache>/models--OWNER--NAME/snapshots/<commit>: named OWNER--NAME.
  const std::string repo_folder = p.parent_path().parent_path().filename().string();
  if (p.parent_path().filename() == "snapshots" && repo_folder.rfind("models--", 0) == 0) name = repo_folder.substr(8);
  if (name.empty() || name == "." || name == "..") name = fs::absolute(p).lexically_normal().filename();
  return (fs::path("out") / "eval" / name).string();
}

// The registry's evaluation kind of a task (TaskFamily::evaluation); "" for the lm-eval tasks.
static std::string evaluation_kind(const std::string& name) {
  const auto& registry = TaskRegistry::instance();
  return registry.has(name) ? registry.at(name).evaluation : std::string();
}
static bool is_token_task(const std::string& name) { return evaluation_kind(name) == "token_predictions"; }
// A task whose evaluation the task makes for the model (EvalTask::evaluation): a generation task (S-NIAH, BABILong),
// lm_ppl.
static bool is_model_task(const std::string& name) {
  const std::string kind = evaluation_kind(name);
  return kind == "generate_until" || kind == "token_logprobs";
}

std::vector<std::string> expand_eval_tasks(const std::vector<std::string>& names_or_groups) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& entry : names_or_groups) {
    size_t pos = 0;
    while (pos <= entry.size()) {
      size_t comma = entry.find(',', pos);
      if (comma == std::string::npos) comma = entry.size();
      std::string name = entry.substr(pos, comma - pos);
      pos = comma + 1;
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (name.empty()) continue;
      if (is_token_task(name) || is_model_task(name)) {
        add(name);
      } else {
        for (const auto& t : harness::expand_harness_tasks({name})) add(t);
      }
    }
  }
  if (out.empty()) harness::expand_harness_tasks({});  // the Error listing the groups
  return out;
}

std::unique_ptr<harness::HarnessTask> make_eval_task(const std::string& name, const json& checkpoint_config,
                                                     int64_t token_examples, EvalContext* model_context) {
  if (is_model_task(name)) {
    if (!model_context) throw Error("task " + name + " is made for the model it evaluates: it needs one (no --requests-only)");
    std::shared_ptr<const Task> task = TaskRegistry::instance().make(name, checkpoint_task_params(name, checkpoint_config));
    return dynamic_cast<const EvalTask&>(*task).evaluation(*model_context, task);
  }
  if (!is_token_task(name)) return harness::make_harness_task(name);
  // The task as the checkpoint was trained on it when it is the same task, else its defaults; the test examples
  // drawn with the run's seed (those the trainer's evaluation drew).
  const uint64_t seed = checkpoint_config.is_object() ? checkpoint_config.value("seed", uint64_t{0}) : 0;
  auto task = std::dynamic_pointer_cast<TokenTask>(
      TaskRegistry::instance().make(name, checkpoint_task_params(name, checkpoint_config)));
  return std::make_unique<TokenTaskEvaluation>(task, token_examples, seed);
}

json evaluate_harness(const HarnessEvalRequest& a, const std::function<void(const std::string&)>& log) {
  HarnessOptions o = a.options;
  o.tasks = expand_eval_tasks(o.tasks);
  const bool any_text = std::any_of(o.tasks.begin(), o.tasks.end(), [](const std::string& t) { return !is_token_task(t); });
  if (o.requests_only)
    for (const auto& t : o.tasks)
      if (is_model_task(t))
        throw Error("eval: task " + t +
                    (evaluation_kind(t) == "generate_until" ? " sizes its prompts in the model's tokenizer"
                                                            : " reads its stream in the model's tokenizer") +
                    ": --requests-only writes lm-eval and token tasks' requests only");
  if (!any_text && !a.tokenizer.empty())
    throw Error("eval: --tokenizer " + a.tokenizer + " is not used: token tasks (" + o.tasks.front() +
                ") score the ids of their own vocabulary");
  if (a.batch_size) o.token_batch_size = *a.batch_size;
  if (o.requests_only) {
    // Requests are strings before encoding: no model, and the tokenizer (--tokenizer, else byte) is not used.
    const auto tok = load_tokenizer(a.tokenizer.empty() ? "byte" : a.tokenizer);
    if (o.output_path.empty()) o.output_path = default_harness_output_path(a.checkpoint);
    if (a.max_length) o.max_length = *a.max_length;
    if (!o.make_task)
      o.make_task = [&](const std::string& name) { return make_eval_task(name, nullptr, a.token_examples, nullptr); };
    return run_harness(nullptr, tok.get(), o, log);
  }
  if (a.checkpoint.empty()) throw Error("eval --tasks: give --checkpoint DIR (or --requests-only to write the requests)");
  const std::string ckpt = resolve_model_path(a.checkpoint);  // a checkpoint folder or an export's .safetensors
  const json cfg = load_checkpoint_config(ckpt);
  std::shared_ptr<Tokenizer> tok;
  json setting_extra = json::object();
  if (any_text) {
    const CheckpointTokenizer checked = checkpoint_tokenizer(cfg, a.tokenizer, ckpt, a.allow_other_tokenizer, log);
    tok = checked.tokenizer;
    if (checked.other) setting_extra = {{"tokenizer", tok->id()}};
  }
  o.max_length_given = a.max_length.has_value();
  if (a.max_length) {
    o.max_length = *a.max_length;
  } else {
    o.max_length = cfg.contains("seq_len") && cfg["seq_len"].is_number_integer() ? cfg["seq_len"].get<int64_t>() : 2048;
  }
  if (o.output_path.empty()) o.output_path = default_harness_output_path(ckpt);
  const torch::Device device = resolve_device(a.device);
  Backbone model = load_backbone(ckpt, device);
  if (any_text && !model.language_model)
    throw Error("checkpoint " + ckpt + " holds a " + model.kind + ", not a language model (it cannot generate)");
  o.model_name = cfg.value("model", "");
  o.checkpoint = ckpt;
  o.device = device.str();
  o.batch_size = a.batch_size.value_or(device.is_cuda() ? 32 : 1);
  // The database is opened (and created) only to record the finished evaluation: a failure before leaves none.
  int64_t run_id = 0;
  o.record = [&](const std::vector<EvalCell>& cells) {
    ResultsDB db(a.db);
    run_id = checkpoint_run_id(db, ckpt);
    eval_rows_sink(db, o.model_name, ckpt, run_id, a.keep_previous, setting_extra)(cells);
  };
  try {
    o.record_details["config_hash"] = config_hash(resolve_run_config(cfg));
  } catch (const std::exception&) {  // a config this mnemo no longer resolves: the run id still ties the rows
  }
  BackboneAdapter adapter(model, device);
  // Generation tasks (S-NIAH, BABILong) at their default settings (one cell), --limit samples (else their default n),
  // and lm_ppl at its defaults (the training context), with the checkpoint's tokenizer.
  EvalContext model_context(adapter);
  model_context.tokenizer = tok;
  model_context.log = log;
  if (o.limit) model_context.options["n"] = *o.limit;
  if (!o.make_task)
    o.make_task = [&](const std::string& name) { return make_eval_task(name, cfg, a.token_examples, &model_context); };
  json out = run_harness(&adapter, tok.get(), o, log);
  out["run_id"] = run_id;
  return out;
}

}  // namespace mnemo
