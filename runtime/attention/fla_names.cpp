// How fla's model is computed here, established by reading fla (fla-org/flash-linear-attention@bc3b101) beside
// mnemo (fla model_type -> mnemo family: verdict; how established; what is refused):
//  transformer -> transformer (swa when window_size is set): exact. fla/layers/attn.py: q/k/v/o Linear, head_dim d/H,
//    RotaryEmbedding(head_dim, rope_theta) non-interleaved rotate-half (fla/modules/rotary.py), flash_attn causal with
//    scale D^-1/2, GQA q head h -> kv head h/(H/Hkv), window (W-1, 0) = W keys incl. self; vs runtime/attention/
//    attention.cpp (repeat_interleave, apply_rope, blocked_attention). Refused: qkv_bias, qk_norm,
//    attnres_block_size, rope_theta null, odd head dim.
#include "runtime/attention/fla_names.h"

namespace mnemo {

FlaMixerNames attention_fla_names() {
  FlaMixerNames n;
  n.model_type = "transformer";
  n.defaults = {{"num_heads", 32},     {"num_kv_heads", nullptr},   {"qkv_bias", false},
                {"qk_norm", false},    {"window_size", nullptr},    {"rope_theta", 10000.0},
                {"elementwise_affine", true}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    if (c.flag("qkv_bias")) c.refuse("qkv_bias: mnemo's q/k/v projections have no bias");
    if (c.flag("qk_norm")) c.refuse("qk_norm: per-head RMSNorm on q and k, which mnemo's attention does not have");
    if (c.is_null("rope_theta")) c.refuse("rope_theta null: mnemo's attention always applies RoPE");
    c.require_heads_divide(d, H);
    if ((d / H) % 2 != 0) c.refuse("head dim " + std::to_string(d / H) + " is odd (RoPE rotates pairs)");
    int64_t kv = 0;
    if (!c.is_null("num_kv_heads")) {
      kv = c.integer("num_kv_heads");
      if (kv <= 0 || H % kv != 0) c.refuse("num_kv_heads " + std::to_string(kv) + " does not divide num_heads");
    }
    keys["n_kv_heads"] = kv;
    keys["rope_theta"] = c.number("rope_theta");
    if (c.is_null("window_size")) return "transformer";
    const int64_t w = c.integer("window_size");
    if (w <= 0) c.refuse("window_size " + std::to_string(w) + " must be > 0");
    keys["window"] = w;  // flash_attn window (w-1, 0): w keys including the query's own = mnemo swa
    return "swa";
  };
  n.mixer_keys = [](const json&, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
      map[at.mnemo + p + ".weight"] = {{at.fla + p + ".weight"}};
  };
  return n;
}

}  // namespace mnemo
