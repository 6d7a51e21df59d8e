// `mnemo models` and `mnemo tasks`: what is registered, with defaults.
#include <iostream>

#include "cli/commands/commands.h"
#include <algorithm>
#include <iomanip>

#include "engine/presets.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "tasks/task.h"

namespace mnemo::cli {

namespace {
// `mnemo models --sizes`: a table family x size of parameter counts (millions).
void print_model_sizes(int64_t vocab, const std::vector<std::string>& sizes_filter,
                       const std::vector<std::string>& models_filter, bool as_json) {
  std::vector<SizePreset> sizes;
  for (const auto& s : size_presets())
    if (sizes_filter.empty() || std::find(sizes_filter.begin(), sizes_filter.end(), s.name) != sizes_filter.end())
      sizes.push_back(s);
  for (const auto& f : sizes_filter) size_preset(f);  // unknown size -> Error
  std::vector<std::string> models = models_filter.empty() ? Registry::instance().model_names() : models_filter;
  json out = json::object();
  if (!as_json) {
    std::cout << "parameters (millions) at vocab " << vocab << "; sizes: ";
    for (const auto& s : sizes) std::cout << s.name << " = " << s.n_layers << "x" << s.d_model << "/" << s.n_heads << "h  ";
    std::cout << "\n" << std::left << std::setw(16) << "model";
    for (const auto& s : sizes) std::cout << std::right << std::setw(13) << s.name;
    std::cout << "\n";
  }
  for (const auto& m : models) {
    Registry::instance().model(m);  // unknown model -> Error
    if (!as_json) std::cout << std::left << std::setw(16) << m << std::flush;
    for (const auto& s : sizes) {
      json flat = {{"model", m}, {"d_model", s.d_model}, {"n_layers", s.n_layers}, {"n_heads", s.n_heads},
                   {"vocab_size", vocab}};
      ModelConfig mc = model_config_from_json(flat);
      mc.vocab_size = vocab;
      std::string cell;
      try {
        const int64_t n = count_parameters(mc);
        out[m][s.name] = n;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", double(n) / 1e6);
        cell = buf;
      } catch (const std::exception& e) {  // e.g. a head dimension the size does not allow
        out[m][s.name] = nullptr;
        cell = "n/a";
      }
      if (!as_json) std::cout << std::right << std::setw(13) << cell << std::flush;
    }
    if (!as_json) std::cout << "\n";
  }
  if (as_json) std::cout << out.dump(2) << "\n";
}
}  // namespace

void add_info_commands(CLI::App& app) {
  auto* models = app.add_subcommand("models", "List registered model families with their default arguments");
  static bool models_json = false, models_sizes = false;
  static int64_t sizes_vocab = 32000;
  static std::vector<std::string> sizes_filter, models_filter;
  models->add_flag("--json", models_json, "Machine-readable output");
  models->add_flag("--sizes", models_sizes,
                   "Parameter count of every family at every named size (computed by building the blocks)");
  models->add_option("--vocab", sizes_vocab, "--sizes: vocabulary size (default 32000, the papers' tokenizers)");
  models->add_option("--size", sizes_filter, "--sizes: only these sizes")->delimiter(',');
  models->add_option("--model", models_filter, "--sizes: only these families")->delimiter(',');
  models->callback([] {
    if (models_sizes) {
      print_model_sizes(sizes_vocab, sizes_filter, models_filter, models_json);
      return;
    }
    auto& reg = Registry::instance();
    json out = json::array();
    for (const auto& name : reg.model_names()) {
      const auto& m = reg.model(name);
      const MixerKeys keys = model_mixer_keys(name, json());
      json entry = {{"name", name},
                    {"description", m.description},
                    {"layers", m.layer_pattern},
                    {"defaults", keys.defaults},
                    {"cpu_quickstart", m.cpu_quickstart}};
      // Keys whose default differs between the pattern's mixers: each layer keeps its own unless set flat.
      if (!keys.without_default.empty()) {
        json per_layer = json::object();
        for (auto it = keys.without_default.begin(); it != keys.without_default.end(); ++it)
          for (const auto& mixer : keys.declared_by.at(it.key()))
            per_layer[it.key()][mixer] = reg.mixer(mixer).defaults[it.key()];
        entry["per_layer_defaults"] = per_layer;
      }
      out.push_back(entry);
    }
    if (models_json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    for (const auto& m : out) {
      std::cout << m["name"].get<std::string>() << "  —  " << m["description"].get<std::string>() << "\n";
      if (m["layers"].size() > 1) std::cout << "    layers: " << m["layers"].dump() << "\n";
      std::cout << "    defaults: " << m["defaults"].dump() << "\n";
      if (m.contains("per_layer_defaults"))
        std::cout << "    per-layer defaults (set flat for all, or per layer): " << m["per_layer_defaults"].dump() << "\n";
    }
  });

  auto* tasks = app.add_subcommand("tasks", "List registered tasks with their parameters and defaults");
  static bool tasks_json = false;
  tasks->add_flag("--json", tasks_json, "Machine-readable output");
  tasks->callback([] {
    auto& reg = TaskRegistry::instance();
    json out = json::array();
    for (const auto& name : reg.names()) {
      const auto& t = reg.at(name);
      out.push_back({{"name", name}, {"description", t.description}, {"trainable", t.trainable},
                     {"defaults", t.defaults}, {"help", t.help}});
    }
    if (tasks_json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    for (const auto& t : out) {
      std::cout << t["name"].get<std::string>() << (t["trainable"].get<bool>() ? " [trainable]" : "") << "  —  "
                << t["description"].get<std::string>() << "\n";
      for (auto it = t["defaults"].begin(); it != t["defaults"].end(); ++it) {
        std::cout << "    --" << it.key() << " (default " << it.value().dump() << ")";
        if (t["help"].contains(it.key())) std::cout << "  " << t["help"][it.key()].get<std::string>();
        std::cout << "\n";
      }
    }
  });
}

}  // namespace mnemo::cli
