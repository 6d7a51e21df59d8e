// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  kda -> kda: exact when norm_eps = 1e-6; checked on logits of fla's own KimiDeltaAttention model
//    (tests/data/fla_models/kda, made by scripts/make_fla_models.py). fla/layers/kda.py: q/k/v Linear + ShortConvolution
//    (SiLU), l2norm of q and k in the kernel, f_proj = Linear(d, d_v) Linear(d_v, H·d_k), g = −exp(A_log)
//    softplus(f + dt_bias), beta = sigmoid(b_proj x) without bias, o_norm FusedRMSNormGated(sigmoid) with
//    g_proj = Linear(d, d_v) Linear(d_v, H·d_v, bias); vs runtime/kda/mixer.cpp. Refused: num_v_heads != num_heads,
//    safe_gate (its lower-bounded gate is another function), norm_eps != 1e-6.
#include "runtime/kda/fla_names.h"

namespace mnemo {

FlaMixerNames kda_fla_names() {
  FlaMixerNames n;
  n.model_type = "kda";
  n.defaults = {{"expand_v", 1.0},    {"use_short_conv", true}, {"allow_neg_eigval", false}, {"safe_gate", false},
                {"lower_bound", nullptr}, {"conv_size", 4},   {"head_dim", 128},          {"num_heads", 16},
                {"num_v_heads", nullptr}, {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t H = keys.at("n_heads");
    c.require_norm_eps_1e6();
    c.require_same_kv_heads("num_v_heads", H);
    if (c.flag("safe_gate") || !c.is_null("lower_bound"))
      c.refuse("safe_gate / lower_bound: the lower-bounded gate lower_bound·σ(·) is not mnemo's KDA gate");
    fla_head_layout_keys(c, keys, c.integer("head_dim"), c.number("expand_v"));
    keys["allow_neg_eigval"] = c.flag("allow_neg_eigval");
    return "kda";
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    fla_map_qkv_projections(keys, at, map);
    map[at.mnemo + "f_down.weight"] = {{at.fla + "f_proj.0.weight"}};
    map[at.mnemo + "f_up.weight"] = {{at.fla + "f_proj.1.weight"}};
    map[at.mnemo + "b_proj.weight"] = {{at.fla + "b_proj.weight"}};
    map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
    map[at.mnemo + "dt_bias"] = {{at.fla + "dt_bias"}};
    map[at.mnemo + "g_down.weight"] = {{at.fla + "g_proj.0.weight"}};
    map[at.mnemo + "g_up.weight"] = {{at.fla + "g_proj.1.weight"}};
    map[at.mnemo + "g_up.bias"] = {{at.fla + "g_proj.1.bias"}};
    map[at.mnemo + "norm.weight"] = {{at.fla + "o_norm.weight"}};
    map[at.mnemo + "o_proj.weight"] = {{at.fla + "o_proj.weight"}};
  };
  return n;
}

}  // namespace mnemo
