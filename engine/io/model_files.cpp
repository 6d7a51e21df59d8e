#include "engine/io/model_files.h"

#include <set>

#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo {

namespace {

std::string shape_text(const torch::Tensor& t) { return json(t.sizes().vec()).dump(); }

}  // namespace

std::string backbone_kind(const json& resolved_config) {
  auto task = TaskRegistry::instance().make(resolved_config.at("task").get<std::string>(), task_params_of(resolved_config));
  return task_backbone(*task);
}

// The tensors of model.pt exactly as stored (dtype included), named and ordered as `model`'s state. Read from the
// archive directly: torch::load into a module of another dtype reinterprets the bytes (LibTorch 1.13).
std::vector<std::pair<std::string, torch::Tensor>> stored_state(const std::string& file, const Backbone& model) {
  torch::serialize::InputArchive root;
  try {
    root.load_from(file);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error("incompatible or corrupted checkpoint " + file + ": " + what.substr(0, what.find('\n')));
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  size_t n_params = model.module->named_parameters().size();
  for (const auto& [name, expected] : backbone_state(model)) {
    std::deque<torch::serialize::InputArchive> path;  // Module::save nests one archive per submodule
    torch::serialize::InputArchive* a = &root;
    size_t start = 0, dot;
    torch::Tensor t;
    bool found = true;
    while (found && (dot = name.find('.', start)) != std::string::npos) {
      path.emplace_back();
      found = a->try_read(name.substr(start, dot - start), path.back());
      a = &path.back();
      start = dot + 1;
    }
    if (found) found = a->try_read(name.substr(start), t, /*is_buffer=*/out.size() >= n_params);
    if (!found) throw Error("checkpoint " + file + " does not fit its config: '" + name + "' is missing");
    if (t.sizes() != expected.sizes())
      throw Error("checkpoint " + file + " does not fit this model: '" + name + "' is " + shape_text(t) +
                  " in the checkpoint, " + shape_text(expected) + " in the model (a size such as vocab_size differs)");
    out.emplace_back(name, t);
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> backbone_state(const Backbone& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.module->named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : model.module->named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

void load_backbone_state(Backbone& model, const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& source) {
  const auto state = backbone_state(model);
  std::set<std::string> expected;
  for (const auto& [name, t] : state) {
    expected.insert(name);
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw Error(source + " does not fit this model: key '" + name + "' (" + shape_text(t) + ") is missing");
    if (it->second.sizes() != t.sizes())
      throw Error(source + " does not fit this model: '" + name + "' is " + shape_text(it->second) + " in the file, " +
                  shape_text(t) + " in the model");
    if (it->second.is_floating_point() != t.is_floating_point())
      throw Error(source + ": '" + name + "' is stored as " + c10::toString(it->second.scalar_type()) +
                  ", the model holds " + c10::toString(t.scalar_type()));
  }
  for (const auto& [name, t] : tensors)
    if (!expected.count(name))
      throw Error(source + " does not fit this model: key '" + name + "' (" + shape_text(t) +
                  ") has no place in it (another model family or size?)");
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    torch::Tensor target = t;  // shares the module's tensor: set_data swaps its storage in place
    target.set_data(tensors.at(name).to(t.device()));
  }
}

std::pair<json, json> export_run_config(const std::string& config_json_path) {
  json cfg = read_json_file(config_json_path);
  if (!cfg.is_object()) throw Error(config_json_path + " is not a JSON object");
  if (cfg.value("format", json()) != json(kSafetensorsExportFormat))
    throw Error(config_json_path + ": \"format\" is " + json_excerpt(cfg.value("format", json())) + ", expected \"" +
                kSafetensorsExportFormat + "\" (not a mnemo export)");
  json meta = cfg.value("mnemo_model", json::object());
  cfg.erase("format");
  cfg.erase("mnemo_model");
  return {cfg, meta};
}

Backbone load_backbone_safetensors(const std::string& safetensors_path, const std::string& config_json_path,
                                   const torch::Device& device) {
  const auto [cfg, meta] = export_run_config(config_json_path);
  json resolved;
  try {
    resolved = resolve_run_config(cfg);
  } catch (const Error& e) {
    throw Error("incompatible export " + config_json_path + ": " + e.what());
  }
  ModelConfig mc = model_config_from_json(resolved);
  mc.vocab_size = meta.value("vocab_size", mc.vocab_size);
  const std::string kind = meta.value("backbone", backbone_kind(resolved));
  Backbone model = make_backbone(kind, mc);
  if (meta.contains("layer_mixers") && meta["layer_mixers"] != json(mc.layer_mixers()))
    throw Error(config_json_path + ": mnemo_model.layer_mixers " + json_excerpt(meta["layer_mixers"]) +
                " differ from the config's " + json_excerpt(json(mc.layer_mixers())));
  SafetensorsFile file(safetensors_path);
  auto fmt = file.metadata().find("format");
  if (fmt != file.metadata().end() && fmt->second != kSafetensorsExportFormat)
    throw Error("safetensors file " + safetensors_path + ": __metadata__.format is '" + fmt->second + "', expected '" +
                kSafetensorsExportFormat + "'");
  load_backbone_state(model, file.load_all(), "safetensors file " + safetensors_path);
  model.module->to(device);
  model.module->eval();
  return model;
}

}  // namespace mnemo
