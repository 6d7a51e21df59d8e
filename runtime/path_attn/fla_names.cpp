// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  path_attn -> path_attn: exact for full forwards; checked on logits of fla's own model (tests/data/fla_models/
//    path_attn, made by scripts/make_fla_models.py with fla's naive_path_attn in place of its Triton kernel).
//    fla/layers/path_attn.py: q/k/v/o Linear without bias, head_dim d/H, w_proj = Linear(d, 32) then Linear(32, d)
//    (use_low_rank_w) or Linear(d, d), w_conv1d ShortConvolution (kernel 3, SiLU, no bias; use_w_shortconv), w
//    l2-normalised per head (eps 1e-6 inside the root), β = 2 σ(bt_proj x) with bias, g = logsigmoid(g_proj x) with
//    bias (use_forget_gate), parallel_path_attn with scale D^-1/2, no RoPE; vs runtime/path_attn/mixer.cpp.
//    Refused: num_kv_heads != num_heads, attnres_block_size (block-attention residuals).
#include "runtime/path_attn/fla_names.h"

namespace mnemo {

FlaMixerNames path_attn_fla_names() {
  FlaMixerNames n;
  n.model_type = "path_attn";
  n.defaults = {{"num_heads", 32},         {"num_kv_heads", nullptr},   {"use_forget_gate", false},
                {"use_w_shortconv", true}, {"use_low_rank_w", true},    {"attnres_block_size", nullptr},
                {"elementwise_affine", true}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_heads_divide(d, H);
    c.require_same_kv_heads("num_kv_heads", H);
    if (!c.is_null("attnres_block_size")) c.refuse("attnres_block_size: mnemo's blocks have plain residuals");
    if (!c.flag("elementwise_affine")) c.refuse("elementwise_affine false: mnemo's block norms have weights");
    keys["use_forget_gate"] = c.flag("use_forget_gate");
    keys["use_w_shortconv"] = c.flag("use_w_shortconv");
    keys["use_low_rank_w"] = c.flag("use_low_rank_w");
    keys["conv_size"] = 3;  // fla's model builds the layer with its default kernel
    return "path_attn";
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) map[at.mnemo + p + ".weight"] = {{at.fla + p + ".weight"}};
    if (keys.at("use_low_rank_w").get<bool>()) {
      map[at.mnemo + "w_down.weight"] = {{at.fla + "w_proj.0.weight"}};
      map[at.mnemo + "w_up.weight"] = {{at.fla + "w_proj.1.weight"}};
    } else {
      map[at.mnemo + "w_proj.weight"] = {{at.fla + "w_proj.weight"}};
    }
    if (keys.at("use_w_shortconv").get<bool>()) map[at.mnemo + "w_conv.weight"] = {{at.fla + "w_conv1d.weight"}};
    map[at.mnemo + "bt_proj.weight"] = {{at.fla + "bt_proj.weight"}};
    map[at.mnemo + "bt_proj.bias"] = {{at.fla + "bt_proj.bias"}};
    if (keys.at("use_forget_gate").get<bool>()) {
      map[at.mnemo + "g_proj.weight"] = {{at.fla + "g_proj.weight"}};
      map[at.mnemo + "g_proj.bias"] = {{at.fla + "g_proj.bias"}};
    }
  };
  return n;
}

}  // namespace mnemo
