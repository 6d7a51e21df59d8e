// How fla's model is computed here (fla model_type -> mnemo family: verdict; reason):
//  rwkv7 -> refused. fla's RWKV7 model differs from mnemo's block skeleton outside the mixer: LayerNorm (with bias)
//    instead of RMSNorm before the mixer and the feed-forward, an extra LayerNorm after the embedding in layer 0, the
//    channel-mix feed-forward (token shift, squared ReLU, no gate) instead of SwiGLU, and the value residual that
//    hands layer 0's values to every later layer's time mixing (docs/models.md#rwkv-7). The mixer's own parameters
//    follow fla's RWKV7Attention (runtime/rwkv7/mixer.cpp) so that the import can be added with those parts.
#include "runtime/rwkv7/fla_names.h"

namespace mnemo {

FlaMixerNames rwkv7_fla_names() {
  FlaMixerNames n;
  n.model_type = "rwkv7";
  n.refusal =
      "its blocks use LayerNorm, a token-shift squared-ReLU channel mix and a value residual from layer 0, none of "
      "which mnemo's block skeleton computes (docs/models.md#rwkv-7)";
  return n;
}

}  // namespace mnemo
