#include "engine/evaluation/checkpoint_eval.h"

#include <cmath>
#include <filesystem>

#include "engine/config/run_config.h"
#include "engine/io/checkpoint.h"
#include "tasks/lm_task.h"

namespace mnemo {

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

json checkpoint_task_params(const std::string& task_name, const json& cfg, const json& overrides) {
  json params = json::object();
  const std::string trained_on = cfg.is_object() ? cfg.value("task", "") : "";
  if (!trained_on.empty() && (task_name == trained_on || (task_name == "lm_ppl" && trained_on == "lm")))
    params = task_params_of(resolve_run_config(cfg));
  params.update(overrides);
  return params;
}

}  // namespace mnemo
