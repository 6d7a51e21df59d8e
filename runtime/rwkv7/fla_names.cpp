// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  rwkv7 -> rwkv7: exact; checked on logits of fla's own RWKV7ForCausalLM (tests/data/fla_models/rwkv7, made by
//    scripts/make_fla_models.py). fla/models/rwkv7/modeling_rwkv7.py RWKV7Block: layer 0's pre_norm after the
//    embedding (norm_first), attn_norm -> RWKV7Attention -> residual, ffn_norm -> RWKV7FeedForward -> residual, all
//    LayerNorm (norm_bias) with norm_eps; model.norm; lm_head. fla/layers/rwkv7.py RWKV7Attention: x_r … x_g token-shift
//    mixes ([1, 1, d], read as [d]), r/k/v/o_proj, LoRA w (tanh), a (none), g (sigmoid, no bias) and, after layer 0,
//    v (none) whose gate lerps towards layer 0's v; k_k, k_a, r_k; g_norm GroupNorm(eps head_dim·norm_eps); vs
//    runtime/rwkv7/mixer.cpp. RWKV7FeedForward: x_k, key, value, sqrelu; vs runtime/rwkv7/channel_mix.cpp.
//    Refused: value_dim != hidden_size, hidden_act other than sqrelu, an intermediate_size that is not a multiple
//    of 32. The export (from_mnemo) writes these fields back; fla loads it and gives mnemo's logits
//    (tests/data/fla_export/rwkv7, made by scripts/make_fla_export_fixtures.py).
#include "runtime/rwkv7/fla_names.h"

#include <cmath>

#include "runtime/rwkv7/channel_mix.h"
#include "runtime/rwkv7/rwkv7.h"

namespace mnemo {

FlaMixerNames rwkv7_fla_names() {
  FlaMixerNames n;
  n.model_type = "rwkv7";
  n.block_ffn = "rwkv_channel_mix";
  n.names.mlp_norm = "ffn_norm";
  n.names.embed_norm = "layers.0.pre_norm";
  n.defaults = {{"head_dim", 64},           {"num_heads", nullptr},      {"decay_low_rank_dim", 64},
                {"gate_low_rank_dim", 128}, {"a_low_rank_dim", 64},      {"v_low_rank_dim", 16},
                {"hidden_act", "sqrelu"},   {"norm_first", true},        {"norm_bias", true},
                {"norm_eps", 1e-5},         {"value_dim", nullptr},      {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_heads_divide(d, H);
    if (!c.is_null("head_dim") && c.integer("head_dim") * H != d)
      c.refuse("head_dim " + json_excerpt(c.config.at("head_dim")) + " x num_heads " + std::to_string(H) +
               " != hidden_size " + std::to_string(d));
    const json& value_dim = c.config.at("value_dim");
    const bool values_as_keys =
        value_dim.is_null() || (value_dim.is_number_integer() && value_dim.get<int64_t>() == d) ||
        (value_dim.is_array() && std::all_of(value_dim.begin(), value_dim.end(), [&](const json& v) {
           return v.is_number_integer() && v.get<int64_t>() == d;
         }));
    if (!values_as_keys)
      c.refuse("value_dim " + json_excerpt(value_dim) + ": mnemo's rwkv7 has values as wide as its keys (hidden_size)");
    if (c.config.at("hidden_act") != "sqrelu")
      c.refuse("hidden_act " + json_excerpt(c.config.at("hidden_act")) + ": mnemo's channel mix is ReLU² (sqrelu)");
    double ratio = 4.0;
    if (c.is_null("intermediate_size")) {
      ratio = c.is_null("hidden_ratio") ? 4.0 : c.number("hidden_ratio");
    } else {
      const int64_t hidden = c.integer("intermediate_size");
      ratio = double(hidden) / double(d);
      if (channel_mix_hidden_size(d, ratio) != hidden)
        c.refuse("intermediate_size " + std::to_string(hidden) + " is not a size mnemo's channel-mix rule "
                 "32*ceil(floor(d*r)/32) gives (a multiple of 32)");
    }
    keys["mlp_ratio"] = ratio;
    keys["block_ffn"] = "rwkv_channel_mix";
    keys["block_norm"] = "layernorm";
    keys["embed_norm"] = c.flag("norm_first");
    for (const char* field : {"decay_low_rank_dim", "a_low_rank_dim", "gate_low_rank_dim", "v_low_rank_dim"})
      keys[field] = c.integer(field);
    keys["group_norm_eps"] = c.number("norm_eps");  // g_norm's eps is head_dim · norm_eps, as mnemo's
    keys["value_residual"] = true;
    return "rwkv7";
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    auto put = [&](const std::string& mnemo, const std::string& fla) { map[at.mnemo + mnemo] = {{at.fla + fla}}; };
    const int64_t d = keys.at("d_model");
    for (const char* mix : {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"})
      map[at.mnemo + mix] = {{at.fla + mix}, FlaSource::Fill::none, {1, 1, d}};  // fla's [1, 1, d]
    for (const char* mix : {"k_k", "k_a", "r_k"}) put(mix, mix);
    for (const char* proj : {"r_proj", "k_proj", "v_proj", "o_proj"})
      put(std::string(proj) + ".weight", std::string(proj) + ".weight");
    for (const char* lora : {"w", "a", "g", "v"}) {
      const std::string m = lora, f = m + "_lora.lora.";
      put(m + "_down.weight", f + "0.weight");
      put(m + "_up.weight", f + "2.weight");
      if (m != "g") put(m + "_up.bias", f + "2.bias");
    }
    put("g_norm_weight", "g_norm.weight");
    put("g_norm_bias", "g_norm.bias");
  };
  // The export: fla's fields of a mnemo rwkv7 model, the automatic low-rank widths resolved as the mixer does.
  n.from_mnemo = [](json& view, json& c) {
    const int64_t d = view.at("d_model"), heads = view.at("num_heads"), head_dim = view.at("head_dim");
    c["num_heads"] = heads;
    c["head_dim"] = head_dim;
    c["hidden_act"] = "sqrelu";
    c["hidden_ratio"] = view.at("mlp_ratio");
    c["intermediate_size"] = nullptr;
    c["norm_first"] = view.value("embed_norm", false);
    c["norm_bias"] = true;
    c["value_dim"] = nullptr;
    const double head_factor = double(head_dim) / 64.0;
    for (const auto& [field, factor] : std::vector<std::pair<std::string, double>>{
             {"decay_low_rank_dim", 2.5 * head_factor}, {"a_low_rank_dim", 2.5 * head_factor},
             {"gate_low_rank_dim", 5.0}, {"v_low_rank_dim", 1.7 * head_factor}}) {
      view[field] = rwkv7_low_rank_dim(view.at(field).get<int64_t>(), factor, d);
      c[field] = view[field];
    }
  };
  return n;
}

}  // namespace mnemo
