// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  mesa_net -> mesa_net: exact for full forwards when norm_eps = 1e-6; checked on logits of fla's own MesaNet model
//    (tests/data/fla_models/mesa_net, made by scripts/make_fla_models.py). fla/layers/mesa_net.py: q/k Linear +
//    ShortConvolution (SiLU, no bias; applied whatever use_short_conv says), l2norm of q and k in the kernel,
//    v = v_proj x, g = logsigmoid(a_proj x) and β = sigmoid(b_proj x) with biases, λ = softplus(lambda_params) +
//    lambda_lower_bound per head and channel, the chunk kernel's CG from x = 0 for max_cg_step_training steps,
//    o_norm RMSNorm (or FusedRMSNormGated with swish and g_proj under use_output_gate); vs runtime/mesa_net/mixer.cpp.
//    Decoding: fla's one-token step starts its CG from q / (diag(H) + λ) for max_cg_step_decoding steps; mnemo decodes
//    with the forward's solver (x = 0, cg_steps) so that decoding equals the forward, and the import keeps
//    max_cg_step_training. Refused: norm_eps != 1e-6 (fla's block builds the layer's conv without bias).
#include "runtime/mesa_net/fla_names.h"

#include <algorithm>

namespace mnemo {

FlaMixerNames mesa_net_fla_names() {
  FlaMixerNames n;
  n.model_type = "mesa_net";
  n.defaults = {{"use_output_gate", false},    {"use_short_conv", true},        {"conv_size", 4},
                {"head_dim", 128},             {"num_heads", 16},               {"lambda_lower_bound", 0.25},
                {"max_cg_step_training", 30},  {"max_cg_step_decoding", 30},    {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    c.require_norm_eps_1e6();
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads"), head_dim = c.integer("head_dim");
    if (head_dim <= 0) c.refuse("head_dim must be > 0, got " + std::to_string(head_dim));
    const int64_t steps = c.integer("max_cg_step_training");
    if (steps < 1) c.refuse("max_cg_step_training must be >= 1, got " + std::to_string(steps));
    const double lower = c.number("lambda_lower_bound");
    if (!(lower >= 0 && lower < 1)) c.refuse("lambda_lower_bound must be in [0, 1), got " + std::to_string(lower));
    int64_t skeleton_heads = std::min(H, d);  // the skeleton's n_heads must divide d_model; the mixer uses num_heads
    while (d % skeleton_heads != 0) --skeleton_heads;
    keys["n_heads"] = skeleton_heads;
    keys["num_heads"] = H;
    keys["head_dim"] = head_dim;
    keys["conv_size"] = c.integer("conv_size");
    keys["cg_steps"] = steps;
    keys["lambda_lower_bound"] = lower;
    keys["use_output_gate"] = c.flag("use_output_gate");
    return "mesa_net";
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const std::string p : {"q", "k"}) {
      map[at.mnemo + p + "_proj.proj.weight"] = {{at.fla + p + "_proj.weight"}};
      map[at.mnemo + p + "_proj.conv.weight"] = {{at.fla + p + "_conv1d.weight"}};
    }
    map[at.mnemo + "v_proj.proj.weight"] = {{at.fla + "v_proj.weight"}};
    for (const std::string p : {"a_proj", "b_proj"}) {
      map[at.mnemo + p + ".weight"] = {{at.fla + p + ".weight"}};
      map[at.mnemo + p + ".bias"] = {{at.fla + p + ".bias"}};
    }
    map[at.mnemo + "lambda_params"] = {{at.fla + "lambda_params"}};
    if (keys.value("use_output_gate", false)) {
      map[at.mnemo + "out.gate_proj.weight"] = {{at.fla + "g_proj.weight"}};
      map[at.mnemo + "out.norm.weight"] = {{at.fla + "o_norm.weight"}};
      map[at.mnemo + "out.out_proj.weight"] = {{at.fla + "o_proj.weight"}};
    } else {
      map[at.mnemo + "norm.weight"] = {{at.fla + "o_norm.weight"}};
      map[at.mnemo + "o_proj.weight"] = {{at.fla + "o_proj.weight"}};
    }
  };
  return n;
}

}  // namespace mnemo
