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
// fla model_type -> mnemo family: verdict; how established (fla file vs mnemo file)
//  transformer -> transformer (swa when window_size is set): exact. fla/layers/attn.py: q/k/v/o Linear, head_dim d/H,
//    RotaryEmbedding(head_dim, rope_theta) non-interleaved rotate-half (fla/modules/rotary.py), flash_attn causal with
//    scale D^-1/2, GQA q head h -> kv head h/(H/Hkv), window (W-1, 0) = W keys incl. self; vs runtime/attention/
//    attention.cpp (repeat_interleave, apply_rope, blocked_attention). Refused: qkv_bias, qk_norm,
//    attnres_block_size, rope_theta null, odd head dim.
//  gla -> gla: exact when norm_eps = 1e-6. fla/layers/gla.py: q/k/v Linear (+ ShortConvolution + SiLU, no bias),
//    gk = logsigmoid(gk_proj.1(gk_proj.0 x)) / 16 (rank 16, bias on .1; GLABlock passes neither), chunk_gla scale
//    K^-0.5, FusedRMSNormGated(head_v, norm_eps) * swish(g_proj x), o_proj; vs runtime/gla/mixer.cpp (HeadProjection,
//    gate_down/gate_up, GatedOutput with eps 1e-6). Refused: norm_eps != 1e-6, num_kv_heads != num_heads,
//    feature_map, clamp_min, use_output_gate false, use_gk false / use_gv true, hybrid attn layers.
//  retnet -> retnet: exact when norm_eps = 1e-6. fla/layers/multiscale_retention.py: plain q/k/v (RetNetBlock passes
//    no use_short_conv: never a conv), RoPE(head_k_dim, base 10000), decay ln(1-2^(-5-h)) (fla/ops/retention/
//    chunk.py g_gamma), scale K^-0.5, gated RMSNorm, o_proj; vs runtime/retnet/mixer.cpp + retnet_log_decay.
//    Refused: as gla (no gk), an odd or > 256 key head dim.
//  delta_net -> deltanet: exact when norm_eps = 1e-6. fla/layers/delta_net.py: conv + SiLU on q, k, v, l2norm in the
//    kernel (fla/modules/l2norm.py: eps 1e-6 inside the sqrt), beta = sigmoid(b_proj x) without bias (mnemo's
//    b_proj.bias is set to 0), o_norm RMSNorm, or FusedRMSNormGated with g_proj (use_gate), o_proj; vs
//    runtime/delta_rule/mixer.cpp. Refused: use_beta false, qk_activation != silu, qk_norm != l2, norm_eps != 1e-6.
//  gated_deltanet -> gated_deltanet: exact when norm_eps = 1e-6. fla/layers/gated_deltanet.py and
//    fla/ops/gated_delta_rule/gate.py naive_gdn_gate: g = -exp(A_log) softplus(a_proj x + dt_bias), beta =
//    sigmoid(b_proj x) (bias -> 0), l2norm q, k (eps 1e-6), scale K^-0.5; vs runtime/delta_rule/mixer.cpp (gated).
//    Refused: num_v_heads != num_heads (GVA), norm_eps != 1e-6, hybrid attn layers.
//  mamba2: refused. fla/models/mamba2/modeling_mamba2.py Mamba2Block = RMSNorm -> Mamba2 -> residual with no MLP;
//    mnemo's BlockImpl (runtime/model.cpp) always adds mlp_norm + SwiGLU. (Its gated group norm also takes
//    norm_eps, default 1e-5; runtime/mamba2/mixer.cpp uses 1e-6.)
// All families: hidden_act must be swish (GatedMLP's powlu is refused), intermediate_size must be a size mnemo's rule
// 256*ceil(floor(2/3*d*r)/256) yields (a multiple of 256), and an unknown config field is refused (it may change the
// function). mnemo fixes the eps of the norms inside its mixers at 1e-6: hence the norm_eps conditions.
#include "engine/io/fla_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include "runtime/backbone.h"
#include "engine/io/checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "runtime/layers.h"
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

// fla's config defaults (fla/models/<f>/configuration_<f>.py) for the fields that shape the function: Hugging Face
// writes only the fields that differ from them.
json fla_defaults(const std::string& type, const std::string& where) {
  const json common = {{"hidden_size", 2048}, {"num_hidden_layers", 24}, {"hidden_ratio", 4},
                       {"intermediate_size", nullptr}, {"hidden_act", "swish"}, {"norm_eps", 1e-6},
                       {"tie_word_embeddings", false}, {"vocab_size", 32000}, {"attnres_block_size", nullptr}};
  json d = common;
  if (type == "transformer") {
    d.update({{"num_heads", 32}, {"num_kv_heads", nullptr}, {"qkv_bias", false}, {"qk_norm", false},
              {"window_size", nullptr}, {"rope_theta", 10000.0}, {"elementwise_affine", true}});
  } else if (type == "gla") {
    d.update({{"expand_k", 0.5}, {"expand_v", 1.0}, {"num_heads", 4}, {"num_kv_heads", nullptr},
              {"feature_map", nullptr}, {"use_short_conv", false}, {"conv_size", 4}, {"use_output_gate", true},
              {"clamp_min", nullptr}, {"elementwise_affine", true}, {"use_gk", true}, {"use_gv", false},
              {"attn", nullptr}});
  } else if (type == "retnet") {
    d.update({{"expand_k", 1.0}, {"expand_v", 2.0}, {"hidden_ratio", 2}, {"num_heads", 8}, {"num_kv_heads", nullptr},
              {"feature_map", nullptr}, {"use_short_conv", false}, {"conv_size", 4}, {"use_output_gate", true},
              {"elementwise_affine", true}, {"attn", nullptr}});
  } else if (type == "delta_net") {
    d.update({{"expand_k", 1.0}, {"expand_v", 1.0}, {"use_gate", false}, {"use_short_conv", true},
              {"allow_neg_eigval", false}, {"conv_size", 4}, {"use_beta", true}, {"use_output_norm", true},
              {"num_heads", 16}, {"qk_norm", "l2"}, {"qk_activation", "silu"}, {"attn", nullptr}});
  } else if (type == "gated_deltanet") {
    d.update({{"expand_v", 2.0}, {"use_gate", true}, {"use_short_conv", true}, {"allow_neg_eigval", false},
              {"conv_size", 4}, {"head_dim", 256}, {"num_heads", 6}, {"num_v_heads", nullptr},
              {"num_hidden_layers", 21}, {"attn", nullptr}});
  } else {
    throw Error(where + ": fla model_type '" + type +
                "' has no mnemo import (supported: transformer, gla, retnet, delta_net, gated_deltanet)");
  }
  return d;
}

struct Reader {
  const json& c;
  std::string where;
  const json& at(const std::string& k) const { return c.at(k); }
  int64_t integer(const std::string& k) const {
    const json& v = c.at(k);
    if (!v.is_number_integer())
      throw Error(where + ": fla config field '" + k + "' must be an integer, got " + json_excerpt(v));
    return v.get<int64_t>();
  }
  double number(const std::string& k) const {
    const json& v = c.at(k);
    if (!v.is_number()) throw Error(where + ": fla config field '" + k + "' must be a number, got " + json_excerpt(v));
    return v.get<double>();
  }
  bool flag(const std::string& k) const {
    const json& v = c.at(k);
    if (!v.is_boolean()) throw Error(where + ": fla config field '" + k + "' must be true or false, got " + json_excerpt(v));
    return v.get<bool>();
  }
};

// d * expand as an exact positive multiple of `heads` (fla truncates with int(); mnemo needs it exact), or refuse.
int64_t exact_dim(const Reader& r, const std::string& field, int64_t d, int64_t heads,
                  const std::function<void(const std::string&)>& refuse) {
  const double total = static_cast<double>(d) * r.number(field);
  const int64_t n = std::llround(total);
  if (std::abs(total - static_cast<double>(n)) > 1e-9 || n <= 0 || n % heads != 0)
    refuse("hidden_size * " + field + " = " + std::to_string(total) + " is not a positive multiple of num_heads " +
           std::to_string(heads));
  return n;
}

}  // namespace

FlaModel fla_config_to_mnemo(const json& config, const std::string& where) {
  if (!config.is_object()) throw Error(where + " is not a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw Error(where + ": no \"model_type\" string (not a Hugging Face config.json?)");
  FlaModel m;
  m.fla_model_type = config["model_type"].get<std::string>();
  const std::string type = m.fla_model_type;
  auto refuse = [&](const std::string& what) {
    throw Error(where + ": cannot import fla " + type + " exactly: " + what);
  };
  if (type == "mamba2")
    refuse("fla's Mamba2Block is RMSNorm -> Mamba2 -> residual with no MLP, while every mnemo block adds a "
           "pre-RMSNorm SwiGLU (also its gated norm uses norm_eps, mnemo's 1e-6)");
  json c = fla_defaults(type, where);
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!c.contains(it.key()) && !harmless_keys().count(it.key()))
      throw Error(where + ": fla config field '" + it.key() + "' (" + json_excerpt(it.value()) + ") is not one the " + type +
                  " import knows (checked against " + kFlaCheckedCommit + "); it may change the function, so the "
                  "model is refused");
    if (c.contains(it.key())) c[it.key()] = it.value();
  }
  m.fla_config = c;
  const Reader r{c, where};

  // The skeleton (all families).
  if (!c["attnres_block_size"].is_null())
    refuse("attnres_block_size " + json_excerpt(c["attnres_block_size"]) + " mixes earlier layers' outputs with learned "
           "softmax weights; mnemo's blocks are plain residual");
  if (c.contains("attn") && !c["attn"].is_null())
    refuse("\"attn\" puts softmax-attention layers between the " + type + " layers (a hybrid fla model)");
  if (c["hidden_act"] != "swish")
    refuse("hidden_act " + json_excerpt(c["hidden_act"]) + ": mnemo's MLP (and gate) is SwiGLU (swish)");
  const int64_t d = r.integer("hidden_size");
  if (d <= 0 || r.integer("num_hidden_layers") <= 0) refuse("hidden_size and num_hidden_layers must be > 0");
  m.vocab_size = r.integer("vocab_size");
  int64_t hidden;
  double ratio;
  if (c["intermediate_size"].is_null()) {
    ratio = c["hidden_ratio"].is_null() ? 4.0 : r.number("hidden_ratio");
    hidden = swiglu_hidden_size(d, ratio);  // fla's GatedMLP rule
  } else {
    hidden = r.integer("intermediate_size");
    ratio = 1.5 * static_cast<double>(hidden) / static_cast<double>(d);
    if (swiglu_hidden_size(d, ratio) != hidden)
      refuse("intermediate_size " + std::to_string(hidden) + " is not a size mnemo's SwiGLU rule "
             "256*ceil(floor(2/3*d*r)/256) gives (a multiple of 256)");
  }
  const int64_t H = r.integer("num_heads");
  if (H <= 0) refuse("num_heads must be > 0");
  json k = {{"d_model", d}, {"n_layers", r.integer("num_hidden_layers")}, {"n_heads", H}, {"mlp_ratio", ratio},
            {"tie_embeddings", r.flag("tie_word_embeddings")}, {"norm_eps", r.number("norm_eps")}};
  auto require_eps = [&] {
    if (r.number("norm_eps") != 1e-6)
      refuse("norm_eps " + json_excerpt(c["norm_eps"]) + " also sets the eps of the mixer's output norm, fixed at 1e-6 in "
             "mnemo");
  };
  auto require_heads_divide = [&] {
    if (d % H != 0) refuse("hidden_size " + std::to_string(d) + " is not divisible by num_heads " + std::to_string(H));
  };
  auto require_same_kv_heads = [&](const char* field) {
    if (!c[field].is_null() && r.integer(field) != H)
      refuse(std::string(field) + " " + json_excerpt(c[field]) + " != num_heads " + std::to_string(H) +
             ": shared key/value heads, mnemo's " + type + " has one per head");
  };

  if (type == "transformer") {
    if (r.flag("qkv_bias")) refuse("qkv_bias: mnemo's q/k/v projections have no bias");
    if (r.flag("qk_norm")) refuse("qk_norm: per-head RMSNorm on q and k, which mnemo's attention does not have");
    if (c["rope_theta"].is_null()) refuse("rope_theta null: mnemo's attention always applies RoPE");
    require_heads_divide();
    if ((d / H) % 2 != 0) refuse("head dim " + std::to_string(d / H) + " is odd (RoPE rotates pairs)");
    int64_t kv = 0;
    if (!c["num_kv_heads"].is_null()) {
      kv = r.integer("num_kv_heads");
      if (kv <= 0 || H % kv != 0) refuse("num_kv_heads " + std::to_string(kv) + " does not divide num_heads");
    }
    k["n_kv_heads"] = kv;
    k["rope_theta"] = r.number("rope_theta");
    m.family = "transformer";
    if (!c["window_size"].is_null()) {
      const int64_t w = r.integer("window_size");
      if (w <= 0) refuse("window_size " + std::to_string(w) + " must be > 0");
      k["window"] = w;  // flash_attn window (w-1, 0): w keys including the query's own = mnemo swa
      m.family = "swa";
    }
  } else if (type == "gla" || type == "retnet") {
    require_eps();
    require_heads_divide();
    require_same_kv_heads("num_kv_heads");
    if (!c["feature_map"].is_null()) refuse("feature_map " + json_excerpt(c["feature_map"]) + " on q and k");
    if (!r.flag("use_output_gate")) refuse("use_output_gate false: mnemo's output is always gated");
    const int64_t dk = exact_dim(r, "expand_k", d, H, refuse) / H;
    exact_dim(r, "expand_v", d, H, refuse);
    k["expand_k"] = r.number("expand_k");
    k["expand_v"] = r.number("expand_v");
    if (type == "gla") {
      if (!c["clamp_min"].is_null()) refuse("clamp_min " + json_excerpt(c["clamp_min"]) + " clamps the log decay");
      if (!r.flag("use_gk") || r.flag("use_gv"))
        refuse("use_gk false or use_gv true: older fla wiring with other gates (this fla ignores them)");
      k["short_conv"] = r.flag("use_short_conv");
      k["conv_size"] = r.integer("conv_size");
      k["gla_gate_rank"] = 16;         // GatedLinearAttention default; GLABlock does not pass it
      k["gla_gate_normalizer"] = 16.0;  // likewise gate_logit_normalizer
      m.family = "gla";
    } else {
      if (dk % 2 != 0 || dk > 256) refuse("key head dim " + std::to_string(dk) + " (RoPE needs it even, fla <= 256)");
      k["short_conv"] = false;  // RetNetBlock never passes use_short_conv to MultiScaleRetention
      k["retnet_rope"] = true;
      k["rope_theta"] = 10000.0;  // RotaryEmbedding(dim=head_k_dim) with its default base
      m.family = "retnet";
    }
  } else {  // delta_net, gated_deltanet
    require_eps();
    int64_t dk, dv;
    if (type == "delta_net") {
      if (!r.flag("use_beta")) refuse("use_beta false (beta = 1): mnemo's beta is sigmoid(x w_b + b) in (0, 1)");
      if (c["qk_activation"] != "silu") refuse("qk_activation " + json_excerpt(c["qk_activation"]) + ": mnemo uses SiLU");
      if (c["qk_norm"] != "l2") refuse("qk_norm " + json_excerpt(c["qk_norm"]) + ": mnemo l2-normalises q and k");
      dk = exact_dim(r, "expand_k", d, H, refuse) / H;
      dv = exact_dim(r, "expand_v", d, H, refuse) / H;
      m.family = "deltanet";
    } else {
      require_same_kv_heads("num_v_heads");
      dk = r.integer("head_dim");
      const double v = static_cast<double>(dk) * r.number("expand_v");
      dv = std::llround(v);
      if (dk <= 0 || dv <= 0 || std::abs(v - static_cast<double>(dv)) > 1e-9)
        refuse("head_dim * expand_v = " + std::to_string(v) + " is not a positive integer");
      m.family = "gated_deltanet";
    }
    int64_t n_heads = std::min(H, d);  // the skeleton's n_heads must divide d_model; these mixers use num_heads
    while (d % n_heads != 0) --n_heads;
    k["n_heads"] = n_heads;
    k["num_heads"] = H;
    k["head_dim"] = dk;
    k["expand_v"] = static_cast<double>(dv) / static_cast<double>(dk);
    k["conv_size"] = r.integer("conv_size");
    k["use_short_conv"] = r.flag("use_short_conv");
    k["allow_neg_eigval"] = r.flag("allow_neg_eigval");
    k["output_gate"] = r.flag("use_gate");
  }
  m.model_keys = k;
  return m;
}

std::map<std::string, FlaSource> fla_key_map(const FlaModel& m, const std::string& prefix) {
  std::map<std::string, FlaSource> map;
  auto put = [&](const std::string& mnemo, std::vector<std::string> fla) { map[mnemo] = {std::move(fla)}; };
  auto fill = [&](const std::string& mnemo, FlaSource::Fill f) { map[mnemo] = {{}, f}; };
  const json& c = m.fla_config;
  const int64_t L = m.model_keys.at("n_layers").get<int64_t>();
  put("embed.weight", {prefix + "embeddings.weight"});
  put("final_norm.weight", {prefix + "norm.weight"});
  if (!m.model_keys.at("tie_embeddings").get<bool>()) put("lm_head.weight", {"lm_head.weight"});
  for (int64_t i = 0; i < L; ++i) {
    const std::string M = "block" + std::to_string(i) + ".", P = prefix + "layers." + std::to_string(i) + ".";
    const std::string X = M + "mixer.", A = P + "attn.";
    put(M + "mixer_norm.weight", {P + "attn_norm.weight"});
    put(M + "mlp_norm.weight", {P + "mlp_norm.weight"});
    put(M + "mlp.gate.weight", {P + "mlp.gate_proj.weight"});
    put(M + "mlp.up.weight", {P + "mlp.up_proj.weight"});
    put(M + "mlp.down.weight", {P + "mlp.down_proj.weight"});
    if (m.family == "transformer" || m.family == "swa") {
      for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) put(X + p + ".weight", {A + p + ".weight"});
    } else if (m.family == "gla" || m.family == "retnet") {
      const bool conv = m.model_keys.value("short_conv", false);
      for (const std::string p : {"q", "k", "v"}) {
        put(X + p + ".proj.weight", {A + p + "_proj.weight"});
        if (conv) put(X + p + ".conv.weight", {A + p + "_conv1d.weight"});
      }
      if (m.family == "gla") {
        put(X + "gate_down.weight", {A + "gk_proj.0.weight"});
        put(X + "gate_up.weight", {A + "gk_proj.1.weight"});
        put(X + "gate_up.bias", {A + "gk_proj.1.bias"});
      }
      put(X + "out.gate_proj.weight", {A + "g_proj.weight"});
      put(X + "out.out_proj.weight", {A + "o_proj.weight"});
      // fuse_norm picks FusedRMSNormGated (g_norm_swish_gate) or RMSNorm then swish (g_norm): the same function.
      if (c.value("elementwise_affine", true))
        put(X + "out.norm.weight", {A + "g_norm_swish_gate.weight", A + "g_norm.weight"});
      else
        fill(X + "out.norm.weight", FlaSource::Fill::ones);
    } else {  // deltanet, gated_deltanet
      const bool conv = m.model_keys.at("use_short_conv").get<bool>();
      for (const std::string p : {"q", "k", "v"}) {
        put(X + p + "_proj.proj.weight", {A + p + "_proj.weight"});
        if (conv) put(X + p + "_proj.conv.weight", {A + p + "_conv1d.weight"});
      }
      put(X + "b_proj.weight", {A + "b_proj.weight"});
      fill(X + "b_proj.bias", FlaSource::Fill::zeros);  // fla's b_proj has no bias
      if (m.model_keys.at("output_gate").get<bool>()) {
        put(X + "output.gate_proj.weight", {A + "g_proj.weight"});
        put(X + "output.out_proj.weight", {A + "o_proj.weight"});
        put(X + "output.norm.weight", {A + "o_norm.weight"});
      } else {
        put(X + "norm.weight", {A + "o_norm.weight"});
        put(X + "o_proj.weight", {A + "o_proj.weight"});
      }
      if (m.family == "gated_deltanet") {
        put(X + "a_proj.weight", {A + "a_proj.weight"});
        put(X + "A_log", {A + "A_log"});
        put(X + "dt_bias", {A + "dt_bias"});
      }
    }
  }
  return map;
}

FlaImportResult import_fla(const std::string& model_dir, const std::string& out_dir, const std::string& task,
                           const json& overrides) {
  const fs::path dir(model_dir);
  const std::string config_path = (dir / "config.json").string();
  if (!fs::is_regular_file(config_path)) throw Error("import-fla: no config.json in " + model_dir);
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
    throw Error("import-fla: neither model.safetensors nor model.safetensors.index.json in " + model_dir +
                " (pytorch_model.bin is not read; save with safe_serialization=True)");
  }
  std::string prefix;
  if (file_of.count("model.embeddings.weight")) prefix = "model.";
  else if (!file_of.count("embeddings.weight"))
    throw Error(source + ": no 'model.embeddings.weight' (not an fla model?)");

  // The mnemo run config: the keys derived from fla, the task, then the user's keys (none of the derived ones).
  for (auto it = overrides.begin(); it != overrides.end(); ++it)
    if (m.model_keys.contains(it.key()) || it.key() == "model" || it.key() == "task" || it.key() == "layers")
      throw Error("import-fla: --set " + it.key() + " would change the imported model (it comes from " +
                  config_path + ")");
  json cfg = m.model_keys;
  cfg["model"] = m.family;
  cfg["task"] = task;
  if (TaskRegistry::instance().at(task).defaults.contains("vocab_size") && !overrides.contains("vocab_size"))
    cfg["vocab_size"] = m.vocab_size;
  cfg.update(overrides);
  json resolved;
  try {
    resolved = resolve_run_config(cfg);
  } catch (const Error& e) {
    throw Error("import-fla: " + std::string(e.what()));
  }
  if (backbone_kind(resolved) != "language_model")
    throw Error("import-fla: task '" + task + "' trains an " + backbone_kind(resolved) + ", not a language model");
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
    throw Error("import-fla: mnemo's " + m.family + " has a buffer '" + item.key() + "' the importer cannot fill");

  const auto map = fla_key_map(m, prefix);
  auto shape = [](const torch::Tensor& t) { return json(t.sizes().vec()).dump(); };
  std::set<std::string> used;
  FlaImportResult res;
  torch::NoGradGuard no_grad;
  for (const auto& item : model.module->named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    res.parameters += p.numel();
    auto it = map.find(name);
    if (it == map.end())
      throw Error("import-fla: mnemo's " + m.family + " parameter '" + name + "' has no fla source (the importer's "
                  "key map is out of date with the runtime)");
    const FlaSource& s = it->second;
    if (s.fill == FlaSource::Fill::zeros) { p.zero_(); continue; }
    if (s.fill == FlaSource::Fill::ones) { p.fill_(1.0); continue; }
    auto key = std::find_if(s.keys.begin(), s.keys.end(), [&](const std::string& k) { return file_of.count(k) > 0; });
    if (key == s.keys.end())
      throw Error(source + ": fla key '" + s.keys.front() + "' is missing (mnemo's '" + name + "' needs it)");
    torch::Tensor t = file_of.at(*key)->load(*key);
    if (!t.is_floating_point()) throw Error(source + ": fla key '" + *key + "' is not a floating-point tensor");
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

  if (has_checkpoint(out_dir))
    throw Error("import-fla: " + out_dir + " already holds a mnemo checkpoint; choose a new --out");
  save_checkpoint(out_dir, resolved, model, nullptr, TrainerState{});
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec);
  write_file_atomic((fs::path(out_dir) / "imported_from.json").string(),
                    json{{"source", (ec ? dir : abs).string()}, {"fla_model_type", m.fla_model_type},
                         {"family", m.family}, {"checked_against", kFlaCheckedCommit}, {"tensors", res.tensors}}
                            .dump(2) + "\n");
  res.family = m.family;
  res.checkpoint_dir = checkpoint_dir(out_dir);
  res.config = resolved;
  return res;
}

}  // namespace mnemo
