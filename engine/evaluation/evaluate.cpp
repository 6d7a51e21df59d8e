#include "engine/evaluation/evaluate.h"

#include <cmath>
#include <filesystem>

#include "engine/io/checkpoint.h"
#include "engine/evaluation/generate_until.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/config/run_config.h"
#include "engine/evaluation/token_eval.h"
#include "results/db.h"
#include "runtime/device.h"
#include "tasks/eval_task.h"
#include "tasks/lm_task.h"
#include "tasks/scoring.h"
#include "tasks/task.h"
#include "tasks/token_shard.h"

namespace mnemo {

namespace {
// Token tasks: loss and per-example accuracy on fresh test examples.
json eval_token_task(Backbone& model, TokenTask& task, const json& ckpt_cfg, const EvalRequest& a,
                     const torch::Device& device) {
  if (task.vocab_size() > model.config().vocab_size)
    throw Error("task vocab_size " + std::to_string(task.vocab_size()) + " exceeds the model's " +
                std::to_string(model.config().vocab_size));
  const uint64_t seed = a.seed_given ? a.seed : ckpt_cfg.value("seed", uint64_t{0});
  auto examples = task.examples(Split::test, a.n, seed);
  auto r = evaluate_tokens(model, examples, a.batch_size, device);
  json out = {{"accuracy", r.accuracy}, {"loss", r.loss}, {"n", r.n_examples}};
  torch::NoGradGuard no_grad;
  out.update(task.test_metrics(model.forward, examples, device));
  return out;
}
}  // namespace

json evaluate_generation_task(const GenerationTask& task, EvalContext& ctx) {
  const GenerationPlan plan = task.generation_plan(ctx);
  if (!plan.tokenizer) throw Error("task " + plan.task + ": its generation plan names no tokenizer");
  json cells = json::array();
  std::vector<EvalCell> rows;
  for (int64_t c = 0; c < plan.n_cells; ++c) {
    const double t0 = wall_seconds();
    const GenerationCell cell = plan.cell(c);
    if (cell.docs.size() != cell.requests.size())
      throw Error("task " + plan.task + ": cell " + json_excerpt(cell.setting) + " has " + std::to_string(cell.docs.size()) +
                  " samples but " + std::to_string(cell.requests.size()) + " requests");
    GenerateUntilOptions g;
    g.add_bos = plan.tokenizer->adds_bos();  // encode_with_bos, as the task sized its prompts
    g.prefill_chunk = plan.prefill_chunk;
    std::vector<std::string> texts;
    try {
      texts = generate_until(ctx.model, *plan.tokenizer, cell.requests, g);
    } catch (const Error& e) {
      throw Error("task " + plan.task + ", " + cell.label + ", " + e.what());
    }
    std::vector<double> scores;
    json samples = json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      json record = task.process_results(cell.docs[i], texts[i], plan.mode);
      scores.push_back(record.at("score").get<double>());
      samples.push_back(std::move(record));
    }
    EvalCell row;
    row.task = plan.task;
    row.metric = plan.metric;
    row.setting = cell.setting;
    row.value = mean_percent(scores);
    row.n = static_cast<int64_t>(cell.requests.size());
    row.details = cell.details;
    row.details["wall_s"] = wall_seconds() - t0;
    row.details["samples"] = std::move(samples);
    json summary = cell.setting;
    summary["value"] = row.value;
    summary["n"] = row.n;
    cells.push_back(std::move(summary));
    if (ctx.log) ctx.log(cell.label + ": " + plan.metric + " " + std::to_string(row.value));
    rows.push_back(std::move(row));
  }
  record_cells(ctx, rows);
  return {{"task", plan.task}, {"metric", plan.metric}, {"tokenizer", plan.tokenizer->id()}, {"cells", cells}};
}

std::function<void(const std::vector<EvalCell>&)> eval_rows_sink(ResultsDB& db, const std::string& model_name,
                                                                  const std::string& checkpoint, int64_t run_id,
                                                                  bool keep_previous, const json& setting_extra) {
  return [&db, model_name, checkpoint, run_id, keep_previous, setting_extra](const std::vector<EvalCell>& cells) {
    std::vector<EvalRow> rows;
    const std::string now = now_iso8601();
    for (const EvalCell& c : cells)
      if (!std::isfinite(c.value))  // whatever the path, a non-finite score is never recorded as a result
        throw Error("task " + c.task + ", " + c.setting.dump() + ": " + c.metric + " is " + std::to_string(c.value) +
                    " (non-finite weights or activations?); nothing recorded");
    for (const EvalCell& c : cells) {
      EvalRow r;
      r.created_at = now;
      r.run_id = run_id;
      r.model = model_name;
      r.checkpoint = checkpoint;
      r.task = c.task;
      r.metric = c.metric;
      json setting = c.setting;
      if (setting.is_object()) setting.update(setting_extra);
      r.setting_json = setting.dump();
      r.value = c.value;
      r.n = c.n;
      r.details_json = c.details.dump();
      rows.push_back(std::move(r));
    }
    db.put_evals(rows, keep_previous);
  };
}

int64_t checkpoint_run_id(ResultsDB& db, const std::string& checkpoint) {
  namespace fs = std::filesystem;
  const std::string ckpt = resolve_model_path(checkpoint);  // a checkpoint folder or an export's .safetensors
  rehash_runs_if_old(db);
  std::string hash;
  try {
    hash = config_hash(resolve_run_config(load_checkpoint_config(ckpt)));
  } catch (const std::exception&) {  // a config this mnemo no longer resolves: match by folder only
  }
  auto canonical = [](const fs::path& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(p, ec);
    return ec ? p.lexically_normal() : c;
  };
  // RUN/checkpoint -> RUN; an export RUN/export/model.safetensors -> RUN.
  fs::path parent = fs::path(ckpt).parent_path();
  if (fs::path(ckpt).extension() == ".safetensors" && parent.filename() == "export") parent = parent.parent_path();
  const fs::path run_dir = canonical(parent);
  auto same_dir = [&](const std::string& out_dir) { return !out_dir.empty() && canonical(out_dir) == run_dir; };
  TrainerState st;
  try {
    if (fs::exists(fs::path(ckpt) / "trainer.json")) st = load_trainer_state(ckpt);
  } catch (const Error&) {  // unreadable trainer state: the weights loaded, so look the run up instead
  }
  {
    if (st.run_id > 0)
      if (auto r = db.run(st.run_id))
        if ((!hash.empty() && r->config_hash == hash) || same_dir(r->out_dir)) return st.run_id;
  }
  const auto runs = db.runs();
  for (auto it = runs.rbegin(); it != runs.rend(); ++it)
    if (same_dir(it->out_dir) && (hash.empty() || it->config_hash == hash)) return it->id;
  int64_t found = 0;
  int matches = 0;
  for (const RunInfo& r : runs)
    if (!hash.empty() && r.config_hash == hash && r.status == "completed") {
      found = r.id;
      ++matches;
    }
  return matches == 1 ? found : 0;
}

namespace {
// Two tokenizer ids name the same tokenizer when they are equal, or when both are SentencePiece models with the same
// bytes: such an id also names the file ("sp:NAME:SHA256-PREFIX"), and a copy under another name is the same model.
bool same_tokenizer(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto content = [](const std::string& id) {
    return id.rfind("sp:", 0) == 0 ? id.substr(id.rfind(':') + 1) : std::string();
  };
  const std::string hash = content(a);
  return !hash.empty() && hash == content(b);
}
}  // namespace

CheckpointTokenizer checkpoint_tokenizer(const json& cfg, const std::string& spec, const std::string& ckpt,
                                         bool allow_other, const std::function<void(const std::string&)>& log) {
  const std::string recorded = cfg.contains("tokenizer") && cfg["tokenizer"].is_string() ? cfg["tokenizer"].get<std::string>() : "";
  auto load_recorded = [&]() -> std::shared_ptr<Tokenizer> {
    if (is_corpus_tokenizer_spec(recorded)) return LmTask(task_params_of(resolve_run_config(cfg))).tokenizer(log);
    return load_tokenizer(recorded);
  };
  if (spec.empty()) {
    if (recorded.empty())
      throw Error("checkpoint " + ckpt + " (task '" + cfg.value("task", "") +
                  "') names no tokenizer in its config.json; give --tokenizer byte|FILE.model");
    return {load_recorded(), false};
  }
  CheckpointTokenizer out{load_tokenizer(spec), false};
  if (recorded.empty() || recorded == spec) return out;  // nothing recorded to differ from (an older checkpoint)
  std::string recorded_id, unreadable;
  try {
    recorded_id = load_recorded()->id();
  } catch (const Error& e) {  // e.g. the .model file the run trained with is not on this machine
    unreadable = e.what();
  }
  if (same_tokenizer(recorded_id, out.tokenizer->id())) return out;
  out.other = true;
  if (allow_other) {
    if (log) log("eval: tokenizer " + out.tokenizer->id() + " (--tokenizer " + spec + "), not the checkpoint's '" + recorded +
        "' (--allow-other-tokenizer); the evals rows name it in their cell");
    return out;
  }
  throw Error("checkpoint " + ckpt + " was trained with tokenizer '" + recorded + "'" +
              (recorded_id.empty() ? " (which cannot be loaded here: " + text_excerpt(unreadable, 120) + ")"
                                   : " (" + recorded_id + ")") +
              ", not --tokenizer '" + spec + "' (" + out.tokenizer->id() +
              "): its token ids mean the other tokenizer's pieces; pass --allow-other-tokenizer to evaluate with it "
              "anyway (its rows then name the tokenizer in their cell)");
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
  json metrics;
  if (auto* tt = dynamic_cast<TokenTask*>(task.get())) {
    try {
      metrics = eval_token_task(model, *tt, ckpt_cfg, a, device);
    } catch (const Error& e) {
      throw Error("task " + task_name + ", " + e.what());
    }
  } else {
    throw Error("task '" + task_name + "' has no evaluation on a checkpoint");
  }
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    if (it.value().is_number() && !std::isfinite(it.value().get<double>()))
      throw Error("task " + task_name + ": " + it.key() + " is " + std::to_string(it.value().get<double>()) +
                  " (non-finite weights or activations?); nothing recorded");
  ResultsDB db(a.db);
  const int64_t run_id = checkpoint_run_id(db, a.checkpoint);
  std::vector<EvalRow> rows;
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    const std::string m = it.key();
    if (m == "n") continue;
    EvalRow r;
    r.run_id = run_id;
    r.model = ckpt_cfg.value("model", "");
    r.task = task_name;
    r.metric = m;
    json setting = task->params();
    setting.update(setting_extra);
    r.setting_json = setting.dump();
    r.checkpoint = resolve_model_path(a.checkpoint);
    r.value = metrics[m].get<double>();
    r.n = metrics.value("n", int64_t{0});
    rows.push_back(r);
  }
  db.put_evals(rows, a.keep_previous);  // replaces the cells' earlier values unless --keep-previous
  return {{"task", task_name}, {"params", task->params()}, {"model", ckpt_cfg.value("model", "")},
          {"run_id", run_id}, {"metrics", metrics}};
}

}  // namespace mnemo
