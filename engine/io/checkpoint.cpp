#include "engine/io/checkpoint.h"
#include "engine/io/fla_import.h"
#include "runtime/mixed_precision.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "core/atomic_file.h"
#include "core/file_tree.h"
#include "engine/io/model_files.h"
#include "engine/config/run_config.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo {
namespace fs = std::filesystem;

json TrainerState::to_json() const {
  json j = {{"step", step},     {"run_id", run_id},   {"db_path", db_path}, {"best_test_accuracy", best_test_accuracy},
            {"wall_s", wall_s}, {"train_s", train_s}, {"train_tokens", train_tokens}, {"format", 1}};
  if (!primary_metric.empty()) {
    j["primary_metric"] = primary_metric;
    if (std::isfinite(best_primary)) j["best_primary"] = best_primary;
  }
  if (!data_position.is_null()) j["data"] = data_position;
  return j;
}

namespace {
// An integer field; a float (2.2e81 would overflow the conversion: undefined behaviour, found by fuzz_checkpoint),
// string or missing field is an Error naming it.
int64_t integer_field(const json& j, const char* key, std::optional<int64_t> fallback = std::nullopt) {
  if (!j.contains(key) && fallback) return *fallback;
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw Error(std::string("field '") + key + "' must be an integer, got " + json_excerpt(v));
  return v.get<int64_t>();
}
}  // namespace

TrainerState TrainerState::from_json(const json& j) {
  TrainerState s;
  s.step = integer_field(j, "step");
  s.run_id = integer_field(j, "run_id");
  if (s.step < 0) throw Error("field 'step' must be >= 0, got " + std::to_string(s.step));
  s.db_path = j.value("db_path", "");
  s.best_test_accuracy = j.value("best_test_accuracy", 0.0);
  s.wall_s = j.value("wall_s", 0.0);
  s.train_s = j.value("train_s", 0.0);
  s.train_tokens = integer_field(j, "train_tokens", 0);
  s.primary_metric = j.value("primary_metric", "");
  if (j.contains("best_primary") && j["best_primary"].is_number()) s.best_primary = j["best_primary"].get<double>();
  if (j.contains("data")) s.data_position = j["data"];
  return s;
}

std::string checkpoint_dir(const std::string& out_dir) { return (fs::path(out_dir) / "checkpoint").string(); }

namespace {

// fsync a file or a folder; Error naming it on failure.
void fsync_path(const fs::path& p, bool directory) { mnemo::fsync_path(p.string(), directory); }

void write_file(const fs::path& p, const std::string& text) { write_file_atomic(p.string(), text); }

// torch::save through an AtomicFile. LibTorch's own file writer throws from its destructor when a write fails (a full
// disk, a file size limit), which ends the process in std::terminate; here its writer function never fails: the first
// error is kept, the remaining bytes are dropped, and the error is thrown once LibTorch has returned.
template <typename Value>
void save_torch_file(const Value& value, const fs::path& p) {
  AtomicFile file(p.string());
  std::optional<Error> failed;
  torch::serialize::OutputArchive archive;
  value.save(archive);
  archive.save_to([&](const void* data, size_t n) -> size_t {
    if (!failed) {
      try {
        file.write(data, n);
      } catch (const Error& e) {
        failed = e;
      }
    }
    return n;
  });
  if (failed) throw *failed;
  file.commit();
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

void remove_or_throw(const fs::path& p) {
  std::error_code ec;
  remove_tree(p.string(), ec);  // not fs::remove_all: core/file_tree.h says why
  if (ec) throw Error("cannot remove " + p.string() + ": " + ec.message());
}

// The step of a complete checkpoint folder (trainer.json, written last, parses; the weights and the
// config are there), or -1.
int64_t complete_step(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec) || !fs::is_regular_file(dir / "model.pt", ec) ||
      !fs::is_regular_file(dir / "trainer.json", ec))
    return -1;
  try {
    json j = read_json_file((dir / "trainer.json").string());
    return integer_field(j, "step");
  } catch (const std::exception&) {
    return -1;
  }
}

const char* const kCandidates[] = {"checkpoint", "checkpoint.tmp", "checkpoint.old"};

// The newest complete candidate (ties: the earlier name in kCandidates), or "" if none.
fs::path newest_complete(const fs::path& out) {
  fs::path best;
  int64_t best_step = -1;
  for (const char* name : kCandidates) {
    int64_t s = complete_step(out / name);
    if (s > best_step) {
      best_step = s;
      best = out / name;
    }
  }
  return best;
}

}  // namespace

std::string newest_complete_checkpoint(const std::string& out_dir) { return newest_complete(out_dir).string(); }

bool has_checkpoint(const std::string& out_dir) { return !newest_complete(out_dir).empty(); }

std::string recover_checkpoint(const std::string& out_dir) {
  const fs::path out(out_dir), final_dir = out / "checkpoint";
  std::error_code ec;
  if (!fs::is_directory(out, ec)) return "";
  const fs::path best = newest_complete(out);
  std::string note;
  if (!best.empty() && best != final_dir) {
    // A complete checkpoint left by an interrupted write: `checkpoint` is missing, incomplete or
    // older. Move it aside first (never deleted before its successor is in place).
    const fs::path aside = out / "checkpoint.stale";
    remove_or_throw(aside);
    if (fs::exists(final_dir, ec)) rename_or_throw(final_dir, aside);
    rename_or_throw(best, final_dir);
    fsync_path(out, true);
    note = "recovered the checkpoint at step " + std::to_string(complete_step(final_dir)) + " from " +
           best.filename().string() + " (left by an interrupted checkpoint write)";
  }
  bool removed = false;
  for (const char* name : {"checkpoint.tmp", "checkpoint.old", "checkpoint.stale"}) {
    if (fs::exists(out / name, ec)) {
      remove_or_throw(out / name);
      removed = true;
    }
  }
  if (removed) fsync_path(out, true);
  return note;
}

void save_checkpoint(const std::string& out_dir, const json& config, Backbone& model,
                     torch::optim::Optimizer* optimizer, const TrainerState& state) {
  const fs::path out(out_dir), final_dir = checkpoint_dir(out_dir);
  recover_checkpoint(out_dir);  // leftovers of a crashed write: keep the newest complete one
  const fs::path tmp = out / "checkpoint.tmp", old = out / "checkpoint.old";
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) throw Error("cannot create " + tmp.string() + ": " + ec.message());
  write_file(tmp / "config.json", config.dump(2));
  write_file(tmp / "model.json", json{{"vocab_size", model.config().vocab_size},
                                      {"layer_mixers", model.config().layer_mixers()},
                                      {"backbone", model.kind}}.dump(2));
  try {
    save_torch_file(*model.module, tmp / "model.pt");
    if (optimizer) save_torch_file(*optimizer, tmp / "optim.pt");
  } catch (const c10::Error& e) {
    throw Error("cannot write the checkpoint in " + tmp.string() + ": " + e.what_without_backtrace());
  }
  write_file(tmp / "trainer.json", state.to_json().dump(2));  // last: marks the folder complete
  fsync_path(tmp, true);
  // From here on a complete checkpoint always exists under one of the three names.
  if (fs::exists(final_dir, ec)) rename_or_throw(final_dir, old);
  rename_or_throw(tmp, final_dir);
  fsync_path(out, true);
  remove_or_throw(old);
  fsync_path(out, true);
}

std::string resolve_checkpoint_path(const std::string& path) {
  fs::path p(path);
  if (fs::exists(p / "config.json") && fs::exists(p / "model.pt")) return p.string();
  if (fs::path best = newest_complete(p); !best.empty()) return best.string();
  if (fs::exists(p / "checkpoint" / "config.json")) return (p / "checkpoint").string();
  if (!fs::exists(p)) throw Error("checkpoint not found: " + path);
  throw Error("not a mnemo checkpoint (no config.json + model.pt): " + path);
}

namespace {
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
bool holds_checkpoint(const fs::path& p) {
  return (fs::exists(p / "config.json") && fs::exists(p / "model.pt")) || !newest_complete(p).empty() ||
         fs::exists(p / "checkpoint" / "config.json");
}
}  // namespace

std::optional<ExportFiles> find_export(const std::string& path) {
  const fs::path p(path);
  const std::string ext = p.extension().string();
  auto with_config = [](const fs::path& safetensors, const fs::path& config) {
    if (!is_file(config))
      throw Error("export " + safetensors.string() + ": its config " + config.string() +
                  " is missing (mnemo export writes PATH.safetensors and PATH.json side by side)");
    return ExportFiles{safetensors.string(), config.string()};
  };
  if (ext == ".safetensors" || ext == ".json") {
    fs::path safetensors = p, config = p;
    safetensors.replace_extension(".safetensors");
    config.replace_extension(".json");
    if (!is_file(p) || !is_file(safetensors)) return std::nullopt;  // a lone .json is no export
    return with_config(safetensors, config);
  }
  std::error_code ec;
  if (!fs::is_directory(p, ec) || holds_checkpoint(p)) return std::nullopt;
  for (const fs::path& dir : {p, p / "export"})
    if (is_file(dir / "model.safetensors")) return with_config(dir / "model.safetensors", dir / "model.json");
  return std::nullopt;
}

std::string resolve_model_path(const std::string& path) {
  if (is_hf_model_folder(path)) return path;
  if (auto e = find_export(path)) return e->safetensors;
  if (fs::exists(path) && !holds_checkpoint(path))
    throw Error("neither a mnemo checkpoint (config.json + model.pt), an export (PATH.safetensors + PATH.json) nor "
                "a Hugging Face model folder (config.json + model.safetensors): " + path);
  return resolve_checkpoint_path(path);
}

json load_checkpoint_config(const std::string& path) {
  if (is_hf_model_folder(path)) return fla_folder_run_config(path);
  if (auto e = find_export(path)) return export_run_config(e->config_json).first;
  return read_json_file((fs::path(resolve_checkpoint_path(path)) / "config.json").string());
}

TrainerState load_trainer_state(const std::string& path) {
  auto file = (fs::path(resolve_checkpoint_path(path)) / "trainer.json").string();
  try {
    return TrainerState::from_json(read_json_file(file));
  } catch (const json::exception& e) {
    throw Error("corrupted trainer state " + file + ": " + e.what());
  } catch (const Error& e) {
    throw Error("corrupted trainer state " + file + ": " + e.what());
  }
}

CheckpointModelMeta parse_model_meta(const json& meta, const std::string& file) {
  if (!meta.is_object()) throw Error("corrupted checkpoint metadata " + file + ": expected a JSON object");
  CheckpointModelMeta m;
  auto bad = [&](const std::string& field, const std::string& expected) {
    return Error("corrupted checkpoint metadata " + file + ": '" + field + "' must be " + expected + ", got " +
                 json_excerpt(meta.at(field)));
  };
  if (meta.contains("vocab_size")) {
    const json& v = meta.at("vocab_size");
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxVocabSize)
      throw bad("vocab_size", "an integer in [1, " + std::to_string(kMaxVocabSize) + "]");
    m.vocab_size = v.get<int64_t>();
  }
  if (meta.contains("backbone")) {
    if (!meta.at("backbone").is_string()) throw bad("backbone", "a string");
    m.backbone = meta.at("backbone").get<std::string>();
  }
  if (meta.contains("layer_mixers")) {
    const json& v = meta.at("layer_mixers");
    if (!v.is_array()) throw bad("layer_mixers", "an array of mixer names");
    std::vector<std::string> names;
    for (const auto& n : v) {
      if (!n.is_string()) throw bad("layer_mixers", "an array of mixer names");
      names.push_back(n.get<std::string>());
    }
    m.layer_mixers = std::move(names);
  }
  return m;
}

CheckpointModelMeta read_model_meta(const std::string& checkpoint_dir) {
  const fs::path file = fs::path(checkpoint_dir) / "model.json";
  if (!fs::exists(file)) return {};
  json meta;
  try {
    meta = read_json_file(file.string());
  } catch (const Error& e) {
    throw Error("corrupted checkpoint " + checkpoint_dir + ": " + e.what());
  }
  return parse_model_meta(meta, file.string());
}

Backbone load_backbone(const std::string& path, const torch::Device& device) {
  if (is_hf_model_folder(path)) return load_fla_folder(path, device);
  if (auto e = find_export(path)) return load_backbone_safetensors(e->safetensors, e->config_json, device);
  const std::string dir = resolve_checkpoint_path(path);
  json cfg = load_checkpoint_config(dir);
  json resolved;
  try {
    resolved = resolve_run_config(cfg);
  } catch (const Error& e) {
    throw Error("incompatible checkpoint " + dir + ": " + e.what());
  }
  ModelConfig mc = model_config_from_json(resolved);
  const CheckpointModelMeta meta = read_model_meta(dir);
  mc.vocab_size = meta.vocab_size.value_or(mc.vocab_size);
  // A run trained in fp64 is loaded in fp64 (its weights as saved); fp32 and bf16 runs keep fp32 weights.
  const DefaultDtypeScope dtype_scope(parse_precision(resolved.at("precision")));
  Backbone model = make_backbone(meta.backbone ? *meta.backbone : backbone_kind(resolved), mc);
  load_weights(dir, model);
  model.module->to(device);
  model.module->eval();
  return model;
}

LanguageModel load_model(const std::string& path, const torch::Device& device) {
  Backbone b = load_backbone(path, device);
  if (!b.language_model)
    throw Error("checkpoint " + resolve_model_path(path) + " holds a " + b.kind +
                ", not a language model (it cannot generate)");
  return b.language_model;
}

void check_checkpoint_model(const std::string& path, const Backbone& model) {
  const std::string dir = resolve_checkpoint_path(path);
  // Older checkpoints have no model.json: load_weights still checks every shape.
  const CheckpointModelMeta meta = read_model_meta(dir);
  auto differs = [&](const std::string& key, const json& in_checkpoint, const json& here) {
    throw Error("checkpoint " + dir + " does not match this run: its model has " + key + " " + json_excerpt(in_checkpoint) +
                ", this run's has " + json_excerpt(here));
  };
  const ModelConfig& mc = model.config();
  if (meta.backbone && *meta.backbone != model.kind) differs("backbone", *meta.backbone, model.kind);
  if (meta.vocab_size && *meta.vocab_size != mc.vocab_size) differs("vocab_size", *meta.vocab_size, mc.vocab_size);
  if (meta.layer_mixers && *meta.layer_mixers != mc.layer_mixers())
    differs("layer_mixers", *meta.layer_mixers, mc.layer_mixers());
}

void load_weights(const std::string& path, Backbone& model) {
  const std::string file = (fs::path(resolve_checkpoint_path(path)) / "model.pt").string();
  // Read from the archive, not with torch::load: LibTorch 1.13's torch::load into a module of another dtype
  // reinterprets the stored bytes (an fp64 checkpoint would become garbage fp32 weights, silently).
  const auto stored = stored_state(file, model);  // every tensor present, shapes checked
  const auto state = backbone_state(model);
  for (size_t i = 0; i < state.size(); ++i)
    if (stored[i].second.scalar_type() != state[i].second.scalar_type())
      throw Error("checkpoint " + file + " does not fit this model: '" + state[i].first + "' is stored as " +
                  c10::toString(stored[i].second.scalar_type()) + ", the model holds " +
                  c10::toString(state[i].second.scalar_type()) + " (the checkpoint was saved at another precision)");
  load_backbone_state(model, std::map<std::string, torch::Tensor>(stored.begin(), stored.end()), "checkpoint " + file);
}

void load_optimizer(const std::string& path, torch::optim::Optimizer& optimizer) {
  auto file = (fs::path(resolve_checkpoint_path(path)) / "optim.pt").string();
  try {
    torch::load(optimizer, file);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error("incompatible or corrupted optimizer state " + file + ": " + what.substr(0, what.find('\n')));
  }
}

}  // namespace mnemo
