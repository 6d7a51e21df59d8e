// How fla's model is computed here, established by reading fla (fla-org/flash-linear-attention@bc3b101) beside
// mnemo (fla model_type -> mnemo family: verdict; how established; what is refused):
//  retnet -> retnet: exact when norm_eps = 1e-6. fla/layers/multiscale_retention.py: plain q/k/v (RetNetBlock passes
//    no use_short_conv: never a conv), RoPE(head_k_dim, base 10000), decay ln(1-2^(-5-h)) (fla/ops/retention/
//    chunk.py g_gamma), scale K^-0.5, gated RMSNorm, o_proj; vs runtime/retnet/mixer.cpp + retnet_log_decay.
//    Refused: as gla (no gk), an odd or > 256 key head dim.
#include "runtime/retnet/fla_names.h"

#include "runtime/gla/fla_names.h"

namespace mnemo {

FlaMixerNames retnet_fla_names() {
  FlaMixerNames n;
  n.model_type = "retnet";
  n.defaults = gla_family_fla_defaults();
  n.defaults.update({{"expand_k", 1.0}, {"expand_v", 2.0}, {"hidden_ratio", 2}, {"num_heads", 8}});
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t dk = gla_family_fla_keys(c, keys);
    if (dk % 2 != 0 || dk > 256) c.refuse("key head dim " + std::to_string(dk) + " (RoPE needs it even, fla <= 256)");
    keys["short_conv"] = false;  // RetNetBlock never passes use_short_conv to MultiScaleRetention
    keys["retnet_rope"] = true;
    keys["rope_theta"] = 10000.0;  // RotaryEmbedding(dim=head_k_dim) with its default base
    return "retnet";
  };
  n.mixer_keys = gla_family_fla_mixer_keys;
  return n;
}

}  // namespace mnemo
