#include "runtime/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "runtime/config.h"

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

void save_checkpoint(const std::string& out_dir, const json& config, LanguageModel& model,
                     torch::optim::Optimizer* optimizer, const TrainerState& state) {
  fs::path final_dir = checkpoint_dir(out_dir);
  fs::path tmp = fs::path(out_dir) / "checkpoint.tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_file(tmp / "config.json", config.dump(2));
  write_file(tmp / "model.json", json{{"vocab_size", model->config().vocab_size},
                                      {"layer_mixers", model->config().layer_mixers()}}.dump(2));
  torch::save(model, (tmp / "model.pt").string());
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

LanguageModel load_model(const std::string& path, const torch::Device& device) {
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
  LanguageModel model(mc);
  try {
    torch::load(model, (fs::path(dir) / "model.pt").string());
  } catch (const c10::Error& e) {
    throw Error("incompatible or corrupted checkpoint " + dir + "/model.pt: " + e.what_without_backtrace());
  }
  model->to(device);
  model->eval();
  return model;
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
