// How fla's model is computed here, established by reading fla (fla-org/flash-linear-attention@bc3b101) beside
// mnemo (fla model_type -> mnemo family: verdict; how established; what is refused):
//  delta_net -> deltanet: exact when norm_eps = 1e-6. fla/layers/delta_net.py: conv + SiLU on q, k, v, l2norm in the
//    kernel (fla/modules/l2norm.py: eps 1e-6 inside the sqrt), beta = sigmoid(b_proj x) without bias (imported
//    with beta_bias false), o_norm RMSNorm, or FusedRMSNormGated with g_proj (use_gate), o_proj; vs
//    runtime/delta_rule/mixer.cpp. Refused: use_beta false, qk_activation != silu, qk_norm != l2, norm_eps != 1e-6.
//  gated_deltanet -> gated_deltanet: exact when norm_eps = 1e-6. fla/layers/gated_deltanet.py and
//    fla/ops/gated_delta_rule/gate.py naive_gdn_gate: g = -exp(A_log) softplus(a_proj x + dt_bias), beta =
//    sigmoid(b_proj x) (no bias: beta_bias false), l2norm q, k (eps 1e-6), scale K^-0.5; vs
//    runtime/delta_rule/mixer.cpp (gated). Refused: num_v_heads != num_heads (GVA), norm_eps != 1e-6, hybrid attn
//    layers, output_gate_activation sigmoid.
#include "runtime/delta_rule/fla_names.h"

#include <algorithm>

namespace mnemo {

namespace {

// The keys both share, once the key and value head dims are known.
void delta_rule_keys(const FlaConfigView& c, json& keys, int64_t dk, double expand_v) {
  fla_head_layout_keys(c, keys, dk, expand_v);
  keys["allow_neg_eigval"] = c.flag("allow_neg_eigval");
  keys["output_gate"] = c.flag("use_gate");
  keys["beta_bias"] = false;  // fla's b_proj is nn.Linear(..., bias=False)
}

void delta_rule_mixer_keys(const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
  fla_map_qkv_projections(keys, at, map);
  map[at.mnemo + "b_proj.weight"] = {{at.fla + "b_proj.weight"}};
  if (keys.value("beta_bias", true)) map[at.mnemo + "b_proj.bias"] = {{}, FlaSource::Fill::zeros};  // fla has none
  if (keys.at("output_gate").get<bool>()) {
    map[at.mnemo + "output.gate_proj.weight"] = {{at.fla + "g_proj.weight"}};
    map[at.mnemo + "output.out_proj.weight"] = {{at.fla + "o_proj.weight"}};
    map[at.mnemo + "output.norm.weight"] = {{at.fla + "o_norm.weight"}};
  } else {
    map[at.mnemo + "norm.weight"] = {{at.fla + "o_norm.weight"}};
    map[at.mnemo + "o_proj.weight"] = {{at.fla + "o_proj.weight"}};
  }
}

}  // namespace

FlaMixerNames deltanet_fla_names() {
  FlaMixerNames n;
  n.model_type = "delta_net";
  n.defaults = {{"expand_k", 1.0},   {"expand_v", 1.0},          {"use_gate", false},   {"use_short_conv", true},
                {"allow_neg_eigval", false}, {"conv_size", 4},   {"use_beta", true},    {"use_output_norm", true},
                {"num_heads", 16},   {"qk_norm", "l2"},          {"qk_activation", "silu"}, {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_norm_eps_1e6();
    if (!c.flag("use_beta")) c.refuse("use_beta false (beta = 1): mnemo's beta is sigmoid(x w_b + b) in (0, 1)");
    if (c.config.at("qk_activation") != "silu")
      c.refuse("qk_activation " + json_excerpt(c.config.at("qk_activation")) + ": mnemo uses SiLU");
    if (c.config.at("qk_norm") != "l2")
      c.refuse("qk_norm " + json_excerpt(c.config.at("qk_norm")) + ": mnemo l2-normalises q and k");
    const int64_t dk = c.exact_dim("expand_k", d, H) / H;
    const int64_t dv = c.exact_dim("expand_v", d, H) / H;
    delta_rule_keys(c, keys, dk, static_cast<double>(dv) / static_cast<double>(dk));
    return "deltanet";
  };
  n.mixer_keys = delta_rule_mixer_keys;
  return n;
}

FlaMixerNames gated_deltanet_fla_names() {
  FlaMixerNames n;
  n.model_type = "gated_deltanet";
  n.defaults = {{"expand_v", 2.0},    {"use_gate", true}, {"use_short_conv", true}, {"allow_neg_eigval", false},
                {"conv_size", 4},     {"head_dim", 256},  {"num_heads", 6},         {"num_v_heads", nullptr},
                {"num_hidden_layers", 21}, {"attn", nullptr}, {"output_gate_activation", "swish"}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t H = keys.at("n_heads");
    c.require_norm_eps_1e6();
    const json& act = c.config.at("output_gate_activation");
    if (act != "swish" && act != "silu")
      c.refuse("output_gate_activation " + json_excerpt(act) + ": mnemo's output gate is SiLU (swish)");
    c.require_same_kv_heads("num_v_heads", H);
    const int64_t dk = c.integer("head_dim");
    delta_rule_keys(c, keys, dk, c.number("expand_v"));  // refuses a d_v that is not a positive integer
    return "gated_deltanet";
  };
  n.mixer_keys = [](const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    delta_rule_mixer_keys(keys, fla_config, at, map);
    map[at.mnemo + "a_proj.weight"] = {{at.fla + "a_proj.weight"}};
    map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
    map[at.mnemo + "dt_bias"] = {{at.fla + "dt_bias"}};
  };
  return n;
}

}  // namespace mnemo
