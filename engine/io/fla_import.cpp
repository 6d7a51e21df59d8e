// fla -> mnemo import, compared against fla-org/flash-linear-attention@bc3b101 (fla/layers, fla/models, fla/modules,
// fla/ops) and mnemo's runtime (runtime/model.cpp: embed -> blocks of pre-RMSNorm mixer + residual, pre-RMSNorm
// SwiGLU + residual -> final RMSNorm -> head). Every accepted family has fla's block wiring (fla/models/<f>/
// modeling_<f>.py <F>Block: attn_norm -> attn -> residual, mlp_norm -> GatedMLP -> residual; model.norm; lm_head tied
// or not), fla's GatedMLP (fla/modules/mlp.py: I = 256*ceil(int(2/3*d*r)/256), down(silu(gate)*up)) and RMSNorm
// (fla/modules/layernorm.py rms_norm_ref: x*rsqrt(mean x^2 + eps)*w), as runtime/layers.cpp. Every nn.Linear is
// [out, in] in both and every ShortConvolution (fla/modules/conv/short_conv.py: depthwise Conv1d, padding K-1, first T
// outputs) is [C, 1, K] like mnemo's ShortConv: no transposes, and no fused projections to split (both keep q, k, v
// apart).
//
// Each family's own mapping (config fields, refusals, parameter names) is on its registration
// (FamilyTraits::fla, runtime/<family>/fla_names.cpp), with the fla file it was compared against.
// All families: hidden_act must be swish (GatedMLP's powlu is refused), intermediate_size must be a size mnemo's rule
// 256*ceil(floor(2/3*d*r)/256) yields (a multiple of 256), and an unknown config field is refused (it may change the
// function). mnemo fixes the eps of the norms inside its mixers at 1e-6: hence the norm_eps conditions. A family
// whose fla block has another feed-forward part or LayerNorm says so on its registration (FlaMixerNames::block_ffn;
// RWKV-7: runtime/rwkv7/fla_names.cpp).
#include "engine/io/fla_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include "runtime/backbone.h"
#include "engine/io/model_files.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "runtime/layers.h"
#include "runtime/registry.h"
#include "tasks/task.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

// Fields of Hugging Face's PretrainedConfig and of fla's configs that never change the forward function: kernel
// choice and fusion, losses, initialisation, cache sizing, token ids, generation defaults, bookkeeping.
const std::set<std::string>& harmless_keys() {
  static const std::set<std::string> k = {
      "model_type", "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "auto_map",
      "attn_mode", "use_cache", "initializer_range", "max_position_embeddings", "fuse_norm", "fuse_swiglu",
      "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp", "rescale_prenorm_residual",
      "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id",
      "output_hidden_states", "output_attentions", "return_dict", "torchscript", "use_bfloat16", "tf_legacy_loss",
      "is_decoder", "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "cross_attention_hidden_size",
      "chunk_size_feed_forward", "pruned_heads", "id2label", "label2id", "problem_type", "finetuning_task",
      "tokenizer_class", "prefix", "task_specific_params", "max_length", "min_length", "do_sample", "early_stopping",
      "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
      "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
      "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens"};
  return k;
}

// fla's config defaults (fla/models/<f>/configuration_<f>.py) of the fields every fla model has; each family's own
// fields and defaults come with its registration. Hugging Face writes only the fields that differ from them.
json fla_common_defaults() {
  return {{"hidden_size", 2048},     {"num_hidden_layers", 24}, {"hidden_ratio", 4},
          {"intermediate_size", nullptr}, {"hidden_act", "swish"}, {"norm_eps", 1e-6},
          {"tie_word_embeddings", false}, {"vocab_size", 32000},  {"attnres_block_size", nullptr}};
}

// The registration that imports fla's `type` (Error listing the importable types when none does).
const FlaMixerNames& fla_names_for(const std::string& type, const std::string& where) {
  const Registry& reg = Registry::instance();
  std::string supported;
  for (const std::string& name : reg.mixer_names())
    for (const FlaMixerNames& n : reg.mixer(name).traits.fla) {
      if (n.model_type == type) return n;
      if (n.refusal.empty()) supported += (supported.empty() ? "" : ", ") + n.model_type;
    }
  throw Error(where + ": fla model_type '" + type + "' has no mnemo import (supported: " + supported + ")");
}

}  // namespace

FlaModel fla_config_to_mnemo(const json& config, const std::string& where) {
  if (!config.is_object()) throw Error(where + " is not a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw Error(where + ": no \"model_type\" string (not a Hugging Face config.json?)");
  FlaModel m;
  m.fla_model_type = config["model_type"].get<std::string>();
  const std::string type = m.fla_model_type;
  const FlaMixerNames& names = fla_names_for(type, where);
  if (!names.refusal.empty()) FlaConfigView{config, where, type}.refuse(names.refusal);
  json c = fla_common_defaults();
  if (!names.block_mlp)  // no MLP in fla's block: none of its fields
    for (const char* field : {"hidden_ratio", "intermediate_size", "hidden_act", "attnres_block_size"}) c.erase(field);
  const bool gated_mlp = names.block_mlp && names.block_ffn == "swiglu";  // else the family reads the MLP fields
  c.update(names.defaults);
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!c.contains(it.key()) && !harmless_keys().count(it.key()))
      throw Error(where + ": fla config field '" + it.key() + "' (" + json_excerpt(it.value()) + ") is not one the " + type +
                  " import knows (checked against " + kFlaCheckedCommit + "); it may change the function, so the "
                  "model is refused");
    if (c.contains(it.key())) c[it.key()] = it.value();
  }
  m.fla_config = c;
  const FlaConfigView r{c, where, type};

  // The skeleton (all families).
  if (c.contains("attnres_block_size") && !c["attnres_block_size"].is_null())
    r.refuse("attnres_block_size " + json_excerpt(c["attnres_block_size"]) + " mixes earlier layers' outputs with learned "
           "softmax weights; mnemo's blocks are plain residual");
  if (c.contains("attn") && !c["attn"].is_null())
    r.refuse("\"attn\" puts softmax-attention layers between the " + type + " layers (a hybrid fla model)");
  if (gated_mlp && names.mlp_act.empty() && c["hidden_act"] != "swish")
    r.refuse("hidden_act " + json_excerpt(c["hidden_act"]) + ": mnemo's MLP (and gate) is SwiGLU (swish)");
  if (gated_mlp && !names.mlp_act.empty() && names.mlp_act != "swish")
    r.refuse("the block's MLP activation " + names.mlp_act + ": mnemo's MLP (and gate) is SwiGLU (swish)");
  const int64_t d = r.integer("hidden_size");
  if (d <= 0 || r.integer("num_hidden_layers") <= 0) r.refuse("hidden_size and num_hidden_layers must be > 0");
  m.vocab_size = r.integer("vocab_size");
  double ratio = 4.0;  // unused without an MLP
  if (gated_mlp && c["intermediate_size"].is_null()) {
    ratio = c["hidden_ratio"].is_null() ? 4.0 : r.number("hidden_ratio");
  } else if (gated_mlp) {
    const int64_t hidden = r.integer("intermediate_size");
    ratio = 1.5 * static_cast<double>(hidden) / static_cast<double>(d);
    if (swiglu_hidden_size(d, ratio) != hidden)
      r.refuse("intermediate_size " + std::to_string(hidden) + " is not a size mnemo's SwiGLU rule "
             "256*ceil(floor(2/3*d*r)/256) gives (a multiple of 256)");
  }
  const int64_t H = r.integer("num_heads");
  if (H <= 0) r.refuse("num_heads must be > 0");
  json k = {{"d_model", d}, {"n_layers", r.integer("num_hidden_layers")}, {"n_heads", H}, {"mlp_ratio", ratio},
            {"tie_embeddings", r.flag("tie_word_embeddings")}, {"norm_eps", r.number("norm_eps")}};
  if (!names.block_mlp) k["block_mlp"] = false;
  // The mixer: its family's mapping.
  m.family = names.to_mnemo(r, k);
  m.model_keys = k;
  return m;
}

std::string fla_model_prefix(const FlaModel& m) { return fla_names_for(m.fla_model_type, "fla model").names.model; }

std::map<std::string, FlaSource> fla_key_map(const FlaModel& m, const std::string& prefix) {
  std::map<std::string, FlaSource> map;
  auto put = [&](const std::string& mnemo, std::vector<std::string> fla) { map[mnemo] = {std::move(fla)}; };
  const FlaMixerNames& names = fla_names_for(m.fla_model_type, "fla model");
  const FlaSkeletonNames& s = names.names;
  const int64_t L = m.model_keys.at("n_layers").get<int64_t>();
  // LayerNorm skeletons (block_norm "layernorm") have a bias beside each norm's weight; fla's norm_bias false
  // leaves it out, which is a zero bias.
  const bool layer_norm = m.model_keys.value("block_norm", "rmsnorm") == "layernorm";
  const bool norm_bias = m.fla_config.value("norm_bias", true);
  auto norm = [&](const std::string& mnemo, const std::string& fla) {
    put(mnemo + ".weight", {fla + ".weight"});
    if (layer_norm) map[mnemo + ".bias"] = norm_bias ? FlaSource{{fla + ".bias"}} : FlaSource{{}, FlaSource::Fill::zeros};
  };
  put("embed.weight", {prefix + "embeddings.weight"});
  if (m.model_keys.value("embed_norm", false)) norm("embed_norm", prefix + s.embed_norm);
  norm("final_norm", prefix + s.final_norm);
  if (!m.model_keys.at("tie_embeddings").get<bool>()) put("lm_head.weight", {"lm_head.weight"});
  for (int64_t i = 0; i < L; ++i) {
    const std::string M = "block" + std::to_string(i) + ".", P = prefix + "layers." + std::to_string(i) + ".";
    norm(M + "mixer_norm", P + s.mixer_norm);
    if (names.block_mlp) norm(M + "mlp_norm", P + s.mlp_norm);
    if (names.block_mlp && names.block_ffn == "swiglu") {
      put(M + "mlp.gate.weight", {P + "mlp.gate_proj.weight"});
      put(M + "mlp.up.weight", {P + "mlp.up_proj.weight"});
      put(M + "mlp.down.weight", {P + "mlp.down_proj.weight"});
    } else if (names.block_mlp && names.block_ffn == "rwkv_channel_mix") {
      put(M + "channel_mix.x_k", {P + "ffn.x_k"});
      put(M + "channel_mix.key.weight", {P + "ffn.key.weight"});
      put(M + "channel_mix.value.weight", {P + "ffn.value.weight"});
    }
    names.mixer_keys(m.model_keys, m.fla_config, {M + "mixer.", P + s.mixer + "."}, map);
  }
  return map;
}

bool is_hf_model_folder(const std::string& path) {
  std::error_code ec;
  const fs::path dir(path);
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(dir / "config.json", ec)) return false;
  if (!fs::is_regular_file(dir / "model.safetensors", ec) && !fs::is_regular_file(dir / "model.safetensors.index.json", ec))
    return false;
  // A mnemo export folder (model.safetensors + model.json) or checkpoint (config.json + model.pt) is not one.
  if (fs::exists(dir / "model.pt", ec) || fs::exists(dir / "model.json", ec)) return false;
  try {
    const json c = read_json_file((dir / "config.json").string());
    return c.is_object() && c.contains("model_type");
  } catch (const Error&) {
    return true;  // let the loader name what is wrong with the file
  }
}

json fla_run_config(const FlaModel& m, const std::string& task, const json& overrides, const std::string& where) {
  for (auto it = overrides.begin(); it != overrides.end(); ++it)
    if (m.model_keys.contains(it.key()) || it.key() == "model" || it.key() == "task" || it.key() == "layers")
      throw Error("--set " + it.key() + " would change the imported model (it comes from " + where + ")");
  json cfg = m.model_keys;
  cfg["model"] = m.family;
  cfg["task"] = task;
  if (TaskRegistry::instance().at(task).defaults.contains("vocab_size") && !overrides.contains("vocab_size"))
    cfg["vocab_size"] = m.vocab_size;
  cfg.update(overrides);
  json resolved = resolve_run_config(cfg);
  if (backbone_kind(resolved) != "language_model")
    throw Error("task '" + task + "' trains an " + backbone_kind(resolved) + ", not a language model");
  return resolved;
}

FlaLoadedModel load_fla_model(const std::string& model_dir, const std::string& task, const json& overrides) {
  const fs::path dir(model_dir);
  const std::string config_path = (dir / "config.json").string();
  if (!fs::is_regular_file(config_path)) throw Error("no config.json in " + model_dir);
  const FlaModel m = fla_config_to_mnemo(read_json_file(config_path), config_path);
  // The weights: model.safetensors, or the shards named by model.safetensors.index.json.
  std::map<std::string, std::shared_ptr<SafetensorsFile>> file_of;
  std::string source;
  if (fs::is_regular_file(dir / "model.safetensors")) {
    auto f = std::make_shared<SafetensorsFile>((dir / "model.safetensors").string());
    for (const auto& [name, e] : f->entries()) file_of[name] = f;
    source = f->path();
  } else if (fs::is_regular_file(dir / "model.safetensors.index.json")) {
    source = (dir / "model.safetensors.index.json").string();
    const json index = read_json_file(source);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error(source + ": no \"weight_map\" object");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw Error(source + ": weight_map['" + it.key() + "'] is not a file name");
      auto& f = shards[it.value().get<std::string>()];
      if (!f) f = std::make_shared<SafetensorsFile>((dir / it.value().get<std::string>()).string());
      if (!f->contains(it.key())) throw Error(source + ": '" + it.key() + "' is not in " + f->path());
      file_of[it.key()] = f;
    }
  } else {
    throw Error("neither model.safetensors nor model.safetensors.index.json in " + model_dir +
                " (pytorch_model.bin is not read; save with safe_serialization=True)");
  }
  std::string prefix = fla_model_prefix(m);  // "model." ("backbone." for Mamba2), or "" for a bare base model
  if (!file_of.count(prefix + "embeddings.weight")) {
    if (!file_of.count("embeddings.weight"))
      throw Error(source + ": no '" + prefix + "embeddings.weight' (not an fla model?)");
    prefix.clear();
  }

  json resolved;
  try {
    resolved = fla_run_config(m, task, overrides, config_path);
  } catch (const Error& e) {
    throw Error(model_dir + ": " + e.what());
  }
  ModelConfig mc = model_config_from_json(resolved);
  mc.vocab_size = m.vocab_size;
  Backbone model = [&] {
    try {
      return make_backbone("language_model", mc);
    } catch (const Error& e) {
      throw Error(config_path + ": cannot build mnemo's " + m.family + ": " + e.what());
    }
  }();
  for (const auto& item : model.module->named_buffers())
    throw Error("mnemo's " + m.family + " has a buffer '" + item.key() + "' the importer cannot fill");

  const auto map = fla_key_map(m, prefix);
  auto shape = [](const torch::Tensor& t) { return json(t.sizes().vec()).dump(); };
  std::set<std::string> used;
  FlaLoadedModel res{m, resolved, model};
  res.source = source;
  torch::NoGradGuard no_grad;
  for (const auto& item : model.module->named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    res.parameters += p.numel();
    auto it = map.find(name);
    if (it == map.end())
      throw Error("mnemo's " + m.family + " parameter '" + name + "' has no fla source (the importer's "
                  "key map is out of date with the runtime)");
    const FlaSource& s = it->second;
    if (s.fill == FlaSource::Fill::zeros) { p.zero_(); continue; }
    if (s.fill == FlaSource::Fill::ones) { p.fill_(1.0); continue; }
    auto key = std::find_if(s.keys.begin(), s.keys.end(), [&](const std::string& k) { return file_of.count(k) > 0; });
    if (key == s.keys.end())
      throw Error(source + ": fla key '" + s.keys.front() + "' is missing (mnemo's '" + name + "' needs it)");
    torch::Tensor t = file_of.at(*key)->load(*key);
    if (!t.is_floating_point()) throw Error(source + ": fla key '" + *key + "' is not a floating-point tensor");
    // fla keeps some vectors with leading unit dims (RWKV-7's token-shift mixes [1, 1, d]): the same values.
    auto without_leading_ones = [](at::IntArrayRef s) {
      size_t i = 0;
      while (i + 1 < s.size() && s[i] == 1) ++i;
      return std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
    };
    if (t.sizes() != p.sizes() && without_leading_ones(t.sizes()) == without_leading_ones(p.sizes()))
      t = t.reshape(p.sizes());
    if (t.sizes() != p.sizes())
      throw Error(source + ": fla key '" + *key + "' is " + shape(t) + ", mnemo's '" + name + "' is " + shape(p) +
                  " (config.json and the weights disagree)");
    p.copy_(t.to(p.scalar_type()));
    used.insert(*key);
    ++res.tensors;
  }
  const bool tied = m.model_keys.at("tie_embeddings").get<bool>();
  for (const auto& [key, f] : file_of) {
    if (used.count(key)) continue;
    const std::string inv_freq = ".rotary.inv_freq";  // RoPE's derived table (non-persistent in this fla)
    if (key.size() > inv_freq.size() && key.compare(key.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
      continue;
    if (tied && key == "lm_head.weight") {
      const std::string embed_key = prefix + "embeddings.weight";
      const auto head = f->load(key), embed = file_of.at(embed_key)->load(embed_key);
      if (head.sizes() != embed.sizes() || !torch::equal(head.to(torch::kFloat64), embed.to(torch::kFloat64)))
        throw Error(source + ": tie_word_embeddings is true but lm_head.weight differs from the embeddings");
      continue;
    }
    throw Error(source + ": fla key '" + key + "' " + shape(f->load(key)) + " has no place in mnemo's " + m.family +
                " (a part of the fla model mnemo does not compute)");
  }

  res.backbone = model;
  return res;
}

namespace {
// The evaluation settings a Hugging Face folder carries: its tokenizer file and its context length.
json folder_eval_keys(const std::string& model_dir) {
  const fs::path dir(model_dir);
  json keys = json::object();
  std::error_code ec;
  for (const char* file : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(dir / file, ec)) {
      keys["tokenizer"] = (dir / file).string();
      break;
    }
  const json config = read_json_file((dir / "config.json").string());
  const json& n = config.contains("max_position_embeddings") ? config["max_position_embeddings"] : json();
  keys["seq_len"] = n.is_number_integer() && n.get<int64_t>() > 0 ? n.get<int64_t>() : int64_t{2048};
  return keys;
}
}  // namespace

json fla_folder_run_config(const std::string& model_dir) {
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const FlaModel m = fla_config_to_mnemo(read_json_file(config_path), config_path);
  const json keys = folder_eval_keys(model_dir);
  json resolved = fla_run_config(m, "lm", keys, config_path);
  if (!keys.contains("tokenizer")) resolved.erase("tokenizer");  // none shipped: eval asks for --tokenizer
  return resolved;
}

Backbone load_fla_folder(const std::string& model_dir, const torch::Device& device) {
  FlaLoadedModel loaded = load_fla_model(model_dir, "lm", folder_eval_keys(model_dir));
  loaded.backbone.module->to(device);
  loaded.backbone.module->eval();
  return loaded.backbone;
}

}  // namespace mnemo
