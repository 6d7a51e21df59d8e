// `mnemo models` and `mnemo tasks`: what is registered, with defaults.
#include <iostream>

#include "cli/commands/commands.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "tasks/task.h"

namespace mnemo::cli {

void add_info_commands(CLI::App& app) {
  auto* models = app.add_subcommand("models", "List registered model families with their default arguments");
  static bool models_json = false;
  models->add_flag("--json", models_json, "Machine-readable output");
  models->callback([] {
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
