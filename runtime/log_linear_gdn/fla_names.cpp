// How fla's models relate to this family (fla model_type -> mnemo family: verdict; reason):
//  (none) -> log_linear_gdn. flash-linear-attention 0.6.0 has no log-linear Gated DeltaNet model, so there is no fla
//    checkpoint format for this family.
//  log_linear_mamba2 -> refused. fla's LogLinearMamba2 is Mamba2's layer (one in_proj with an extra
//    num_heads × num_levels slice for the level weights, a per-head, per-level scale L) over log-linear Mamba-2, the
//    scalar-decay mode of this family's kernels (runtime/log_linear_gdn/log_linear_gdn.h; its reference
//    naive_log_linear_attn is the fixture op `log_linear_attn`). mnemo has no log-linear Mamba2 layer to load it into.
#include "runtime/log_linear_gdn/fla_names.h"

namespace mnemo {

FlaMixerNames log_linear_mamba2_fla_names() {
  FlaMixerNames n;
  n.model_type = "log_linear_mamba2";
  n.refusal =
      "it is log-linear Mamba-2 (Mamba2's layer over the log-linear kernel in scalar-decay mode); mnemo computes "
      "that kernel but has no log-linear Mamba2 layer, only log_linear_gdn (docs/models.md#log-linear-gated-deltanet)";
  return n;
}

}  // namespace mnemo
