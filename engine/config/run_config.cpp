#include "engine/config/run_config.h"

#include "core/config_values.h"
#include "engine/config/config_checks.h"
#include "engine/config/presets.h"

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
  json c = resolved;
  for (const RunKey& k : run_keys()) {
    if (!c.contains(k.name)) continue;
    if (k.hash == RunKey::Hash::never || (k.hash == RunKey::Hash::unless_default && c[k.name] == k.default_value))
      c.erase(k.name);
  }
  c.erase("cache_dir");  // the lm task's token cache folder: where data is kept, not what a run computes
  // Mixer and task keys added after the first runs leave the hashes of earlier runs unchanged while at their
  // defaults (their tables carry no hash policy yet).
  for (const auto& [k, v] : std::vector<std::pair<const char*, json>>{
           // The ATLAS cost keys (runtime/atlas/atlas_core.h): at their defaults, earlier ATLAS cells keep
           // their hashes (a sweep does not re-run them).
           {"ns_granularity", "token"}, {"ns_precision", "fp32"}, {"atlas_recompute", true},
           // The MQAR mixture keys (tasks/mqar_task.cpp): empty lists keep earlier MQAR cells.
           {"train_num_kv_pairs", json::array()}, {"train_kv_weights", json::array()},
           {"test_num_kv_pairs", json::array()},
           // The Titans inner-gradient clamp (docs/models.md#titans-inner-gradient-clamp): off, earlier Titans cells keep their hashes.
           {"inner_grad_clip", 0.0}})
    if (c.contains(k) && c[k] == v) c.erase(k);
  // The optional short conv of the transformer: off, earlier Transformer++ cells keep their hashes.
  if (c.value("model", "") == "transformer" && c.value("short_conv", true) == false && c.value("conv_size", 0) == 4) {
    c.erase("short_conv");
    c.erase("conv_size");
  }
  return sha256_hex(c.dump()).substr(0, 16);
}

}  // namespace mnemo
