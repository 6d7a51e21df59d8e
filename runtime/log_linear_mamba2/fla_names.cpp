// fla's "log_linear_mamba2" (fla/models/log_linear_mamba2, fla/layers/log_linear_mamba2.py) <-> log_linear_mamba2.
// LogLinearMamba2Block is Transformer++'s pre-norm block (mixer_norm -> mixer -> mlp_norm -> GatedMLP with
// hidden_ratio 4) under backbone.layers.<i>; the mixer is runtime/log_linear_mamba2/mixer.cpp: in_proj -> [z, xBC,
// dt, dl], depthwise conv1d (+ bias) + SiLU over xBC, dt = softplus(dt + dt_bias), level scales softplus(L · dl)
// over fla's MAX_NUM_LEVELS = 15 levels, chunk_log_linear_attn(q = C, k = B, v = x·dt, g = A·dt, scale 1), + D x,
// RMSNormGated(norm_before_gate=False) = RMSNorm_group(y · SiLU(z)) · w, out_proj. Refused: residual_in_fp32 (fla's
// own block refuses it) and fla_check_mamba2_layer's cases (no gated norm, the norm before the gate, D per channel, a
// dt_limit other than (0, inf), an activation other than SiLU); attention residuals (attnres_block_size) as for every
// fla model (engine/io/fla_import.cpp).
#include "runtime/log_linear_mamba2/fla_names.h"


namespace mnemo {

FlaMixerNames log_linear_mamba2_fla_names() {
  FlaMixerNames n;
  n.model_type = "log_linear_mamba2";
  n.names = {"backbone.", "mixer_norm", "mixer", "norm_f"};
  n.mlp_act = "swish";  // LogLinearMamba2Block's GatedMLP(hidden_act="swish"); the config's hidden_act is the conv's
  n.defaults = {{"state_size", 128},     {"conv_kernel", 4},          {"expand", 2},
                {"head_dim", 64},        {"num_heads", nullptr},      {"n_groups", 1},
                {"use_bias", false},     {"use_conv_bias", true},     {"hidden_act", "silu"},
                {"rmsnorm", true},       {"norm_before_gate", false}, {"D_has_hdim", false},
                {"dt_limit", {0.0, {{"__float__", "Infinity"}}}},   {"norm_eps", 1e-5},
                {"num_hidden_layers", 48}, {"residual_in_fp32", false}, {"chunk_size", 64},
                {"attnres_block_size", nullptr}, {"hidden_ratio", 4}, {"intermediate_size", nullptr},
                {"conv_init", nullptr}, {"A_init_range", {1, 16}}, {"dt_min", 0.001}, {"dt_max", 0.1},
                {"dt_init_floor", 1e-4}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    if (c.flag("residual_in_fp32")) c.refuse("residual_in_fp32: fla's LogLinearMamba2Block itself does not implement it");
    fla_check_mamba2_layer(c);
    fla_mamba_head_keys(c, keys);
    keys.erase("block_mlp");  // unlike Mamba2's block this one has the GatedMLP: the skeleton's default
    keys["conv_size"] = c.integer("conv_kernel");
    keys["conv_bias"] = c.flag("use_conv_bias");
    keys["proj_bias"] = c.flag("use_bias");
    keys["mamba_norm_eps"] = c.number("norm_eps");
    keys["num_levels"] = 15;  // fla's MAX_NUM_LEVELS (ceil(log2 16384) + 1), a constant of its layer
    return "log_linear_mamba2";
  };
  // The export: the bias switches are fields of fla's config the generic mapping does not write.
  n.from_mnemo = [](json& view, json& c) {
    c["use_bias"] = view.value("proj_bias", false);
    c["use_conv_bias"] = view.value("conv_bias", true);
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    const bool bias = keys.at("proj_bias").get<bool>();
    map[at.mnemo + "in_proj.weight"] = {{at.fla + "in_proj.weight"}};
    map[at.mnemo + "conv.weight"] = {{at.fla + "conv1d.weight"}};
    if (keys.at("conv_bias").get<bool>()) map[at.mnemo + "conv_bias"] = {{at.fla + "conv1d.bias"}};
    map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
    map[at.mnemo + "dt_bias"] = {{at.fla + "dt_bias"}};
    map[at.mnemo + "L"] = {{at.fla + "L"}};
    map[at.mnemo + "D"] = {{at.fla + "D"}};
    map[at.mnemo + "norm_weight"] = {{at.fla + "norm.weight"}};
    map[at.mnemo + "out_proj.weight"] = {{at.fla + "out_proj.weight"}};
    if (bias) {
      map[at.mnemo + "in_proj.bias"] = {{at.fla + "in_proj.bias"}};
      map[at.mnemo + "out_proj.bias"] = {{at.fla + "out_proj.bias"}};
    }
  };
  return n;
}

}  // namespace mnemo
