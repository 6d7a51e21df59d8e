// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  forgetting_transformer -> fox: exact; checked on logits of fla's own model (tests/data/fla_models/
//    forgetting_transformer, made by scripts/make_fla_models.py). fla/layers/forgetting_attn.py: q/k/v/o Linear
//    without bias, head_dim d/H, f_proj Linear(d, H) with bias, log f = logsigmoid, parallel_forgetting_attn with
//    scale D^-1/2, no RoPE, optional sigmoid output gate g_proj, optional qk_norm (GroupNorm over the heads, a
//    weight per channel, eps 1e-5: mnemo's qk_norm_per_channel); vs runtime/forgetting_attn/mixer.cpp. Refused:
//    num_kv_heads != num_heads, qkv_bias, window_size.
#include "runtime/forgetting_attn/fla_names.h"

namespace mnemo {

FlaMixerNames forgetting_transformer_fla_names() {
  FlaMixerNames n;
  n.model_type = "forgetting_transformer";
  n.defaults = {{"num_heads", 32},     {"num_kv_heads", nullptr}, {"qkv_bias", false},  {"qk_norm", false},
                {"window_size", nullptr}, {"use_output_gate", false},
                {"elementwise_affine", true}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_heads_divide(d, H);
    c.require_same_kv_heads("num_kv_heads", H);
    if (c.flag("qkv_bias")) c.refuse("qkv_bias: mnemo's q/k/v projections have no bias");
    if (!c.is_null("window_size")) c.refuse("window_size: mnemo's fox attends to every earlier key");
    if (!c.flag("elementwise_affine")) c.refuse("elementwise_affine false: mnemo's block norms have weights");
    keys["use_output_gate"] = c.flag("use_output_gate");
    keys["qk_norm"] = keys["qk_norm_per_channel"] = c.flag("qk_norm");
    return "fox";
  };
  n.from_mnemo = [](json& view, json& c) {  // fla's qk_norm is mnemo's per-channel QK-norm
    c["qk_norm"] = view.value("qk_norm", false) && view.value("qk_norm_per_channel", false);
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) map[at.mnemo + p + ".weight"] = {{at.fla + p + ".weight"}};
    map[at.mnemo + "f_proj.weight"] = {{at.fla + "f_proj.weight"}};
    map[at.mnemo + "f_proj.bias"] = {{at.fla + "f_proj.bias"}};
    if (keys.at("use_output_gate").get<bool>()) map[at.mnemo + "g_proj.weight"] = {{at.fla + "g_proj.weight"}};
    if (keys.at("qk_norm").get<bool>())
      for (const char* p : {"q_norm", "k_norm"}) map[at.mnemo + p + "_weight"] = {{at.fla + p + ".weight"}};
  };
  return n;
}

}  // namespace mnemo
