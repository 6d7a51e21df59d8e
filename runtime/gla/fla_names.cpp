// How fla's model is computed here, established by reading fla (fla-org/flash-linear-attention@bc3b101) beside
// mnemo (fla model_type -> mnemo family: verdict; how established; what is refused):
//  gla -> gla: exact when norm_eps = 1e-6. fla/layers/gla.py: q/k/v Linear (+ ShortConvolution + SiLU, no bias),
//    gk = logsigmoid(gk_proj.1(gk_proj.0 x)) / 16 (rank 16, bias on .1; GLABlock passes neither), chunk_gla scale
//    K^-0.5, FusedRMSNormGated(head_v, norm_eps) * swish(g_proj x), o_proj; vs runtime/gla/mixer.cpp (HeadProjection,
//    gate_down/gate_up, GatedOutput with eps 1e-6). Refused: norm_eps != 1e-6, num_kv_heads != num_heads,
//    feature_map, clamp_min, use_output_gate false, use_gk false / use_gv true, hybrid attn layers.
#include "runtime/gla/fla_names.h"

namespace mnemo {

json gla_family_fla_defaults() {
  return {{"num_kv_heads", nullptr}, {"feature_map", nullptr}, {"use_short_conv", false}, {"conv_size", 4},
          {"use_output_gate", true}, {"elementwise_affine", true}, {"attn", nullptr}};
}

int64_t gla_family_fla_keys(const FlaConfigView& c, json& keys) {
  const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
  c.require_norm_eps_1e6();
  c.require_heads_divide(d, H);
  c.require_same_kv_heads("num_kv_heads", H);
  if (!c.is_null("feature_map")) c.refuse("feature_map " + json_excerpt(c.config.at("feature_map")) + " on q and k");
  if (!c.flag("use_output_gate")) c.refuse("use_output_gate false: mnemo's output is always gated");
  const int64_t dk = c.exact_dim("expand_k", d, H) / H;
  c.exact_dim("expand_v", d, H);
  keys["expand_k"] = c.number("expand_k");
  keys["expand_v"] = c.number("expand_v");
  return dk;
}

void gla_family_fla_mixer_keys(const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map) {
  const bool conv = keys.value("short_conv", false);
  for (const std::string p : {"q", "k", "v"}) {
    map[at.mnemo + p + ".proj.weight"] = {{at.fla + p + "_proj.weight"}};
    if (conv) map[at.mnemo + p + ".conv.weight"] = {{at.fla + p + "_conv1d.weight"}};
  }
  map[at.mnemo + "out.gate_proj.weight"] = {{at.fla + "g_proj.weight"}};
  map[at.mnemo + "out.out_proj.weight"] = {{at.fla + "o_proj.weight"}};
  // fuse_norm picks FusedRMSNormGated (g_norm_swish_gate) or RMSNorm then swish (g_norm): the same function.
  if (fla_config.value("elementwise_affine", true))
    map[at.mnemo + "out.norm.weight"] = {{at.fla + "g_norm_swish_gate.weight", at.fla + "g_norm.weight"}};
  else
    map[at.mnemo + "out.norm.weight"] = {{}, FlaSource::Fill::ones};
}

FlaMixerNames gla_fla_names() {
  FlaMixerNames n;
  n.model_type = "gla";
  n.defaults = gla_family_fla_defaults();
  n.defaults.update({{"expand_k", 0.5}, {"expand_v", 1.0}, {"num_heads", 4}, {"clamp_min", nullptr},
                     {"use_gk", true}, {"use_gv", false}});
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    gla_family_fla_keys(c, keys);
    if (!c.is_null("clamp_min")) c.refuse("clamp_min " + json_excerpt(c.config.at("clamp_min")) + " clamps the log decay");
    if (!c.flag("use_gk") || c.flag("use_gv"))
      c.refuse("use_gk false or use_gv true: older fla wiring with other gates (this fla ignores them)");
    keys["short_conv"] = c.flag("use_short_conv");
    keys["conv_size"] = c.integer("conv_size");
    keys["gla_gate_rank"] = 16;         // GatedLinearAttention default; GLABlock does not pass it
    keys["gla_gate_normalizer"] = 16.0;  // likewise gate_logit_normalizer
    return "gla";
  };
  n.mixer_keys = [](const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    gla_family_fla_mixer_keys(keys, fla_config, at, map);
    map[at.mnemo + "gate_down.weight"] = {{at.fla + "gk_proj.0.weight"}};
    map[at.mnemo + "gate_up.weight"] = {{at.fla + "gk_proj.1.weight"}};
    map[at.mnemo + "gate_up.bias"] = {{at.fla + "gk_proj.1.bias"}};
  };
  return n;
}

}  // namespace mnemo
