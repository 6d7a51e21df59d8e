#include "engine/config/run_config.h"

#include "core/config_values.h"
#include "engine/config/config_checks.h"
#include "engine/config/presets.h"

#include "results/db.h"
#include "runtime/registry.h"
#include "tasks/task.h"

namespace mnemo {

void apply_user_keys(json& cfg, const MixerKeys& mixer_keys, const json& user, const KeyMessages& msg) {
  const std::vector<LayerSpec> layers =
      user.contains("layers") && !user["layers"].is_null() ? parse_layer_specs(user["layers"]) : std::vector<LayerSpec>{};
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string& key = it.key();
    const bool without_default = !cfg.contains(key) && mixer_keys.without_default.contains(key);
    if (!cfg.contains(key) && !without_default) {
      std::string known;
      for (auto k = cfg.begin(); k != cfg.end(); ++k) known += (known.empty() ? "" : ", ") + k.key();
      for (auto k = mixer_keys.without_default.begin(); k != mixer_keys.without_default.end(); ++k)
        known += ", " + k.key();
      throw Error(msg.prefix + "unknown " + msg.label + " '" + key + "' " + msg.context + "; valid keys: " + known);
    }
    const json& witness = without_default ? mixer_keys.without_default[key] : cfg[key];
    if (!value_fits_default(witness, it.value()))
      throw Error(msg.prefix + msg.label + " '" + key + "' expects a " + expected_type_name(witness) +
                  " (default " + json_excerpt(witness) + "), got " + json_excerpt(it.value()));
    for (size_t i = 0; i < layers.size(); ++i)
      if (layers[i].args.contains(key))
        throw Error(msg.prefix + msg.label + " '" + key + "' is given both flat and in layers[" + std::to_string(i) +
                    "] (mixer '" + layers[i].mixer + "'); give it once: flat applies to every layer whose mixer " +
                    "declares it, a layers entry to that layer alone");
    cfg[key] = coerce_to_default(witness, it.value());
  }
}

json resolve_run_config(const json& user) {
  if (!user.is_object()) throw Error("the run configuration must be a JSON object");
  json cfg = training_defaults();
  cfg.update(skeleton_defaults());
  if (!user.contains("model")) throw Error("config is missing 'model' (see `mnemo models`)");
  if (!user.contains("task")) throw Error("config is missing 'task' (see `mnemo tasks`)");
  if (!user["model"].is_string()) throw Error("config key 'model' must be a string");
  if (!user["task"].is_string()) throw Error("config key 'task' must be a string");
  const std::string model = user["model"], task = user["task"];

  const MixerKeys mixer_keys = model_mixer_keys(model, user.value("layers", json()));
  const json task_defaults = TaskRegistry::instance().at(task).defaults;
  // One key, one meaning: a mixer argument named like a training, skeleton or task key would take one value for both.
  for (const auto& [key, mixers] : mixer_keys.declared_by) {
    const std::string owner = mixers.empty() ? "model '" + model + "'" : "mixer '" + mixers.front() + "'";
    // A model family may set a skeleton key of its own (hope: block_ffn "cms"); a mixer argument may not share one.
    if (mixers.empty() && skeleton_defaults().contains(key)) continue;
    if (cfg.contains(key))
      throw Error("config key '" + key + "' is both a training/model key and an argument of " + owner +
                  "; rename the mixer argument");
    if (task_defaults.contains(key))
      throw Error("config key '" + key + "' is both a parameter of task '" + task + "' and an argument of " + owner +
                  "; rename one of them");
  }
  cfg.update(mixer_keys.defaults);
  cfg.update(task_defaults);

  // `bf16_autocast` was a key that nothing read before `precision` existed; configs and checkpoints that carry it
  // as false still load, true is refused with the key that does it now.
  json rest = user;
  if (rest.contains("bf16_autocast")) {
    if (rest["bf16_autocast"] != json(false))
      throw Error("config key 'bf16_autocast' is replaced by 'precision': use precision=bf16");
    rest.erase("bf16_autocast");
  }
  // Named size and recipe (engine/config/presets.h) under the user's explicit keys.
  {
    auto str = [&](const char* k) { return rest.contains(k) && rest[k].is_string() ? rest[k].get<std::string>() : ""; };
    const std::string size = str("size"), recipe = str("recipe");
    const int64_t accum = rest.contains("grad_accum") && rest["grad_accum"].is_number_integer()
                              ? rest["grad_accum"].get<int64_t>() : 1;
    const json preset = preset_keys(size, recipe, cfg.contains("seq_len"), accum, rest.contains("lr"));
    for (auto it = preset.begin(); it != preset.end(); ++it)
      if (!rest.contains(it.key())) cfg[it.key()] = it.value();
  }
  apply_user_keys(cfg, mixer_keys, rest, {"", "config key", "for model '" + model + "' and task '" + task + "'"});
  validate_run_config(cfg);  // ranges (lr > 0, 0 <= beta < 1, ...)
  return cfg;
}

json task_params_of(const json& resolved) {
  const json defaults = TaskRegistry::instance().at(resolved.at("task").get<std::string>()).defaults;
  json p = json::object();
  for (auto it = defaults.begin(); it != defaults.end(); ++it) p[it.key()] = resolved.at(it.key());
  return p;
}

std::string config_hash(const json& resolved) {
  json defaults;
  try {
    defaults = resolve_run_config({{"model", resolved.at("model")}, {"task", resolved.at("task")}});
  } catch (const Error&) {
    defaults = training_defaults();  // a model or task that needs more keys to resolve: the run keys' defaults
    defaults.update(skeleton_defaults());
  }
  json c = json::object();
  for (auto it = resolved.begin(); it != resolved.end(); ++it) {
    const std::string& key = it.key();
    const RunKey* run_key = find_run_key(key);
    if (run_key && !run_key->hashed) continue;
    if (key == "cache_dir") continue;  // the lm task's token cache folder: where data is kept, not what is computed
    const bool identity = key == "model" || key == "task";
    if (!identity && defaults.contains(key) && defaults[key] == it.value()) continue;
    c[key] = it.value();
  }
  return sha256_hex("mnemo config v" + std::to_string(kConfigHashVersion) + " " + c.dump()).substr(0, 16);
}

void rehash_runs_if_old(ResultsDB& db) {
  if (db.read_only() || db.config_hash_version() >= kConfigHashVersion) return;
  db.rehash_runs(kConfigHashVersion, [](const std::string& config_json) -> std::optional<std::string> {
    try {
      return config_hash(resolve_run_config(json::parse(config_json)));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  });
}

}  // namespace mnemo
