#include "engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "engine/run_config.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo {
namespace fs = std::filesystem;

json TrainerState::to_json() const {
  return {{"step", step}, {"run_id", run_id}, {"db_path", db_path}, {"best_test_accuracy", best_test_accuracy},
          {"format", 1}};
}

TrainerState TrainerState::from_json(const json& j) {
  TrainerState s;
  s.step = j.at("step").get<int64_t>();
  s.run_id = j.at("run_id").get<int64_t>();
  s.db_path = j.value("db_path", "");
  s.best_test_accuracy = j.value("best_test_accuracy", 0.0);
  return s;
}

std::string checkpoint_dir(const std::string& out_dir) { return (fs::path(out_dir) / "checkpoint").string(); }

bool has_checkpoint(const std::string& out_dir) {
  return fs::exists(fs::path(checkpoint_dir(out_dir)) / "trainer.json");
}

static void write_file(const fs::path& p, const std::string& text) {
  std::ofstream o(p);
  o << text;
  if (!o) throw Error("cannot write " + p.string());
}

void save_checkpoint(const std::string& out_dir, const json& config, Backbone& model,
                     torch::optim::Optimizer* optimizer, const TrainerState& state) {
  fs::path final_dir = checkpoint_dir(out_dir);
  fs::path tmp = fs::path(out_dir) / "checkpoint.tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_file(tmp / "config.json", config.dump(2));
  write_file(tmp / "model.json", json{{"vocab_size", model.config().vocab_size},
                                      {"layer_mixers", model.config().layer_mixers()},
                                      {"backbone", model.kind}}.dump(2));
  torch::save(model.module, (tmp / "model.pt").string());
  if (optimizer) torch::save(*optimizer, (tmp / "optim.pt").string());
  write_file(tmp / "trainer.json", state.to_json().dump(2));
  fs::path old = fs::path(out_dir) / "checkpoint.old";
  fs::remove_all(old);
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
}

std::string resolve_checkpoint_path(const std::string& path) {
  fs::path p(path);
  if (fs::exists(p / "config.json") && fs::exists(p / "model.pt")) return p.string();
  if (fs::exists(p / "checkpoint" / "config.json")) return (p / "checkpoint").string();
  if (!fs::exists(p)) throw Error("checkpoint not found: " + path);
  throw Error("not a mnemo checkpoint (no config.json + model.pt): " + path);
}

json load_checkpoint_config(const std::string& path) {
  return read_json_file((fs::path(resolve_checkpoint_path(path)) / "config.json").string());
}

TrainerState load_trainer_state(const std::string& path) {
  auto file = (fs::path(resolve_checkpoint_path(path)) / "trainer.json").string();
  try {
    return TrainerState::from_json(read_json_file(file));
  } catch (const json::exception& e) {
    throw Error("corrupted trainer state " + file + ": " + e.what());
  }
}

std::string backbone_kind(const json& resolved_config) {
  auto task = TaskRegistry::instance().make(resolved_config.at("task").get<std::string>(), task_params_of(resolved_config));
  return task_backbone(*task);
}

Backbone load_backbone(const std::string& path, const torch::Device& device) {
  const std::string dir = resolve_checkpoint_path(path);
  json cfg = load_checkpoint_config(dir);
  json resolved;
  try {
    resolved = resolve_run_config(cfg);
  } catch (const Error& e) {
    throw Error("incompatible checkpoint " + dir + ": " + e.what());
  }
  ModelConfig mc = model_config_from_json(resolved);
  json model_meta = read_json_file((fs::path(dir) / "model.json").string());
  mc.vocab_size = model_meta.value("vocab_size", mc.vocab_size);
  Backbone model = make_backbone(model_meta.value("backbone", backbone_kind(resolved)), mc);
  load_weights(dir, model);
  model.module->to(device);
  model.module->eval();
  return model;
}

LanguageModel load_model(const std::string& path, const torch::Device& device) {
  Backbone b = load_backbone(path, device);
  if (!b.language_model)
    throw Error("checkpoint " + resolve_checkpoint_path(path) + " holds a " + b.kind +
                ", not a language model (it cannot generate)");
  return b.language_model;
}

void load_weights(const std::string& path, Backbone& model) {
  const std::string file = (fs::path(resolve_checkpoint_path(path)) / "model.pt").string();
  try {
    torch::load(model.module, file);
  } catch (const c10::Error& e) {
    throw Error("incompatible or corrupted checkpoint " + file + ": " + e.what_without_backtrace());
  }
}

void load_optimizer(const std::string& path, torch::optim::Optimizer& optimizer) {
  auto file = (fs::path(resolve_checkpoint_path(path)) / "optim.pt").string();
  try {
    torch::load(optimizer, file);
  } catch (const c10::Error& e) {
    throw Error("incompatible or corrupted optimizer state " + file + ": " + e.what_without_backtrace());
  }
}

}  // namespace mnemo
