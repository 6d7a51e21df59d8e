// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  gated_deltaproduct -> gated_deltaproduct: exact when norm_eps = 1e-6; checked on logits of fla's own model
//    (tests/data/fla_models/gated_deltaproduct, made by scripts/make_fla_models.py). fla/layers/gated_deltaproduct.py:
//    q Linear(d, H·d_k), k Linear(d, n·H·d_k), v Linear(d, n·H·d_v), b_proj Linear(d, n·H) without bias, each with
//    ShortConvolution (SiLU) and (n, h, d) order, l2norm of q and k in the kernel, g = −exp(A_log) softplus(a_proj x +
//    dt_bias) once per token, FusedRMSNormGated(SiLU) with g_proj; vs runtime/delta_product/mixer.cpp. Refused:
//    num_v_heads != num_heads, use_output_gate false (mnemo's output is always gated), norm_eps != 1e-6.
#include "runtime/delta_product/fla_names.h"

namespace mnemo {

FlaMixerNames gated_deltaproduct_fla_names() {
  FlaMixerNames n;
  n.model_type = "gated_deltaproduct";
  n.defaults = {{"expand_v", 2.0},        {"use_output_gate", true}, {"use_short_conv", true},
                {"allow_neg_eigval", false}, {"use_forget_gate", false}, {"num_householder", 1},
                {"conv_size", 4},         {"head_dim", 256},        {"num_heads", 6},
                {"num_v_heads", nullptr}, {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t H = keys.at("n_heads");
    c.require_norm_eps_1e6();
    c.require_same_kv_heads("num_v_heads", H);
    if (!c.flag("use_output_gate")) c.refuse("use_output_gate false: mnemo's gated_deltaproduct output is always gated");
    const int64_t steps = c.integer("num_householder");
    if (steps < 1) c.refuse("num_householder " + std::to_string(steps) + " must be >= 1");
    fla_head_layout_keys(c, keys, c.integer("head_dim"), c.number("expand_v"));
    keys["allow_neg_eigval"] = c.flag("allow_neg_eigval");
    keys["use_forget_gate"] = c.flag("use_forget_gate");
    keys["num_householder"] = steps;
    return "gated_deltaproduct";
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    fla_map_qkv_projections(keys, at, map);
    map[at.mnemo + "b_proj.weight"] = {{at.fla + "b_proj.weight"}};
    if (keys.at("use_forget_gate").get<bool>()) {
      map[at.mnemo + "a_proj.weight"] = {{at.fla + "a_proj.weight"}};
      map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
      map[at.mnemo + "dt_bias"] = {{at.fla + "dt_bias"}};
    }
    map[at.mnemo + "output.gate_proj.weight"] = {{at.fla + "g_proj.weight"}};
    map[at.mnemo + "output.out_proj.weight"] = {{at.fla + "o_proj.weight"}};
    map[at.mnemo + "output.norm.weight"] = {{at.fla + "o_norm.weight"}};
  };
  return n;
}

}  // namespace mnemo
