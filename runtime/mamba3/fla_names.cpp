// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  mamba3 -> mamba3 (SISO, and MIMO with is_mimo: mamba_mimo_rank = mimo_rank): Mamba3Block is RMSNorm(norm_eps) -> Mamba3 -> residual with no MLP (mnemo's block_mlp
//    false); parameters under backbone.layers.<i>.mixer: in_proj (no bias) -> [z, x, B, C, dt, A, trap, angles],
//    dt_bias, B_bias / C_bias [H, R, N] (R = 1 for SISO), B_norm / C_norm RMSNorm weights over the state (eps
//    norm_eps), D per head, mimo_x / mimo_z / mimo_o [H, R, P] with is_mimo, norm.weight with is_outproj_norm,
//    out_proj; vs runtime/mamba3/mixer.cpp. fla's layer runs only mamba_ssm's CUDA kernels, so the logits are checked
//    against fla's model with the layer's core computed by the reference scan of scripts/make_fla_models.py
//    (tests/data/fla_models/mamba3) and, for MIMO, by mamba_ssm's own PyTorch references of its decode step taken
//    token by token (tests/data/fla_models/mamba3_mimo, rank 2). Refused: use_bias.
#include <cmath>

#include "runtime/mamba3/fla_names.h"

namespace mnemo {

FlaMixerNames mamba3_fla_names() {
  FlaMixerNames n;
  n.model_type = "mamba3";
  n.block_mlp = false;
  n.names = {"backbone.", "norm", "mixer", "norm_f"};
  n.defaults = {{"head_dim", 64},     {"state_size", 128},       {"expand", 2},         {"n_groups", 1},
                {"use_bias", false},  {"rope_fraction", 0.5},    {"A_floor", 1e-4},     {"is_outproj_norm", false},
                {"is_mimo", false},   {"mimo_rank", 4},          {"norm_eps", 1e-5},    {"num_hidden_layers", 48},
                {"residual_in_fp32", true}, {"chunk_size", 64},  {"dt_min", 0.001},     {"dt_max", 0.1},
                {"dt_init_floor", 1e-4}, {"hidden_act", "silu"}, {"num_heads", 64}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    if (c.flag("is_mimo")) {
      const double rank = c.number("mimo_rank");
      if (rank < 1 || rank != static_cast<double>(static_cast<int64_t>(rank)))
        c.refuse("mimo_rank " + std::to_string(rank) + ": must be a whole number >= 1");
      keys["mamba_mimo_rank"] = static_cast<int64_t>(rank);
    }
    if (c.flag("use_bias")) c.refuse("use_bias: mnemo's in_proj and out_proj have no bias");
    const double rope = c.number("rope_fraction");
    if (rope != 0.5 && rope != 1.0) c.refuse("rope_fraction " + std::to_string(rope) + ": must be 0.5 or 1.0");
    fla_mamba_head_keys(c, keys);
    keys["mamba_rope_fraction"] = rope;
    keys["mamba_a_floor"] = c.number("A_floor");
    keys["mamba_outproj_norm"] = c.flag("is_outproj_norm");
    keys["mamba_norm_eps"] = c.number("norm_eps");
    return "mamba3";
  };
  n.from_mnemo = [](json& view, json& c) {  // the fields to_mnemo reads, back from the mixer's arguments
    c["rope_fraction"] = view.value("mamba_rope_fraction", 0.5);
    c["A_floor"] = view.value("mamba_a_floor", 1e-4);
    c["is_outproj_norm"] = view.value("mamba_outproj_norm", false);
    const int64_t rank = view.value("mamba_mimo_rank", int64_t{0});
    c["is_mimo"] = rank > 0;
    if (rank > 0) c["mimo_rank"] = rank;
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* name : {"in_proj.weight", "dt_bias", "B_bias", "C_bias", "D", "out_proj.weight"})
      map[at.mnemo + name] = {{at.fla + name}};
    map[at.mnemo + "B_norm_weight"] = {{at.fla + "B_norm.weight"}};
    map[at.mnemo + "C_norm_weight"] = {{at.fla + "C_norm.weight"}};
    if (keys.value("mamba_outproj_norm", false)) map[at.mnemo + "norm_weight"] = {{at.fla + "norm.weight"}};
    if (keys.value("mamba_mimo_rank", int64_t{0}) > 0)
      for (const char* name : {"mimo_x", "mimo_z", "mimo_o"}) map[at.mnemo + name] = {{at.fla + name}};
  };
  return n;
}

}  // namespace mnemo
