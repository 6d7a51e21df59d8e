#include "engine/config/run_config.h"

#include "core/config_values.h"
#include "engine/config/config_checks.h"
#include "engine/config/presets.h"

#include "runtime/registry.h"
#include "tasks/task.h"

namespace mnemo {

const json& training_defaults() {
  static const json d = {
      {"model", "transformer"}, {"task", "mqar"},
      {"lr", 1e-3},             {"weight_decay", 0.1},  {"beta1", 0.9},       {"beta2", 0.95},
      {"adam_eps", 1e-8},       {"grad_clip", 1.0},     {"warmup_frac", 0.1}, {"min_lr_ratio", 0.1},
      {"steps", 1000},          {"batch_size", 64},     {"seed", 0},          {"eval_every", 100},
      {"log_every", 10},        {"n_train", 10000},     {"n_test", 1000},     {"eval_batch_size", 256},
      {"early_stop_acc", 0.99}, {"device", "auto"},
      {"grad_accum", 1},        {"warmup_steps", -1},   {"primary_metric", ""}, {"size", ""}, {"recipe", ""},
      {"precision", "fp32"}};
  return d;
}

const json& skeleton_defaults() {
  static const json d = {{"d_model", 128},        {"n_layers", 2},       {"n_heads", 4},
                         {"mlp_ratio", 4.0},      {"tie_embeddings", true}, {"norm_eps", 1e-6},
                         {"layers", json::array()}, {"block_mlp", true}};
  return d;
}

const json& config_key_help() {
  static const json h = {
      {"model", "model family (see `mnemo models`)"},
      {"task", "task (see `mnemo tasks`); its parameters are config keys too"},
      {"lr", "peak learning rate (AdamW)"},
      {"weight_decay", "AdamW weight decay on 2-D weight matrices (not norms, biases, embeddings, gates)"},
      {"beta1", "AdamW beta1"}, {"beta2", "AdamW beta2"}, {"adam_eps", "AdamW epsilon"},
      {"grad_clip", "max global gradient norm (0 = off)"},
      {"warmup_frac", "linear warm-up as a fraction of steps, then cosine decay"},
      {"min_lr_ratio", "final learning rate as a fraction of lr"},
      {"steps", "optimiser steps"}, {"batch_size", "sequences per micro-batch (grad_accum micro-batches per step); "
                                  "data-parallel: the whole micro-batch, batch_size / world_size rows per rank"},
      {"seed", "seed for initialisation, data and order"},
      {"eval_every", "evaluate on the test split (and checkpoint) every N steps"},
      {"log_every", "progress line and train metrics every N steps"},
      {"n_train", "training examples (cycled in seeded epochs); 0 = a fresh example each time"},
      {"n_test", "test examples (disjoint seed range)"},
      {"eval_batch_size", "batch size for evaluation"},
      {"early_stop_acc", "stop when test accuracy exceeds this (Zoology: 0.99); 0 = never"},
      {"device", "cpu | cuda | cuda:N | auto"},
      {"precision", "fp32 | bf16 | fp64 (bf16 autocast on the device: matmuls and attention in bf16, every "
                    "recurrence in fp32, fp32 parameters and optimiser state; docs/models.md#numerical-stability. fp64: everything in "
                    "float64, for equivalence checks of whole runs)"},
      {"grad_accum", "micro-batches per optimiser step (each of batch_size sequences; equal to one batch of "
                     "batch_size x grad_accum)"},
      {"warmup_steps", "linear warm-up in steps (-1 = use warmup_frac)"},
      {"primary_metric", "held-out metric for best_* and the progress line (default: accuracy for token tasks, "
                         "ppl for lm)"},
      {"size", "named size: tiny, small, base, 170M, 340M, 760M, 1.3B, mom-1.3B, lattice-110M/340M/760M "
               "(sets d_model, n_layers, n_heads; explicit keys win; `mnemo models --sizes`)"},
      {"recipe", "a paper's training recipe: titans (Titans/Miras/Atlas), mom, lattice (optimiser, schedule, "
                 "batch in tokens, context; explicit keys win)"},
      {"d_model", "model width"}, {"n_layers", "blocks"}, {"n_heads", "heads per mixer"},
      {"mlp_ratio", "SwiGLU hidden ratio r: I = 256*ceil(floor(d*r*2/3)/256)"},
      {"tie_embeddings", "tie the LM head to the embedding"}, {"norm_eps", "RMSNorm epsilon"},
      {"block_mlp", "each block's pre-RMSNorm SwiGLU after the mixer (false: norm, mixer, residual only, as "
                    "Mamba's blocks and flash-linear-attention's Mamba2)"},
      {"layers", "per-layer mixers, repeated over n_layers (empty = the model's own pattern): names or "
                 "{\"mixer\": name, key: value, ...} with arguments for those layers alone"}};
  return h;
}

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
  for (const char* k : {"device", "eval_every", "log_every", "eval_batch_size", "cache_dir"}) c.erase(k);
  // Keys added after the first runs leave the hashes of earlier runs unchanged while at their defaults.
  for (const auto& [k, v] : std::vector<std::pair<const char*, json>>{
           {"grad_accum", 1}, {"warmup_steps", -1}, {"primary_metric", ""}, {"size", ""}, {"recipe", ""},
           {"precision", "fp32"},
           // The ATLAS cost keys (runtime/atlas/atlas_core.h): at their defaults, earlier ATLAS cells keep
           // their hashes (a sweep does not re-run them).
           {"ns_granularity", "token"}, {"ns_precision", "fp32"}, {"atlas_recompute", true},
           // The MQAR mixture keys (tasks/mqar_task.cpp): empty lists keep earlier MQAR cells.
           {"train_num_kv_pairs", json::array()}, {"train_kv_weights", json::array()},
           {"test_num_kv_pairs", json::array()},
           // The Titans inner-gradient clamp (docs/models.md#titans-inner-gradient-clamp): off, earlier Titans cells keep their hashes.
           {"inner_grad_clip", 0.0},
           // The MLP-less block (Mamba's): with the MLP, every earlier cell keeps its hash.
           {"block_mlp", true}})
    if (c.contains(k) && c[k] == v) c.erase(k);
  // The optional short conv of the transformer: off, earlier Transformer++ cells keep their hashes.
  if (c.value("model", "") == "transformer" && c.value("short_conv", true) == false && c.value("conv_size", 0) == 4) {
    c.erase("short_conv");
    c.erase("conv_size");
  }
  return sha256_hex(c.dump()).substr(0, 16);
}

}  // namespace mnemo
