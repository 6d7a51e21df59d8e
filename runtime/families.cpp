// The one place that lists every built-in model family (one line each).
#include "runtime/registry.h"

namespace mnemo {

void register_attention_families(Registry& r);  // transformer, swa (runtime/attention/)
// -- linear-recurrent families (runtime/<family>/mixer.cpp) --
void register_delta_rule_families(Registry& r);  // deltanet, gated_deltanet (runtime/delta_rule/)
void register_linear_attn_family(Registry& r);   // linear_attn (runtime/linear_attn/)
void register_retnet_family(Registry& r);        // retnet (runtime/retnet/)
void register_gla_family(Registry& r);           // gla (runtime/gla/)
void register_mamba2_family(Registry& r);        // mamba2 (runtime/mamba2/)
// -- hybrids --

void register_builtin_families(Registry& r) {
  register_attention_families(r);
  register_delta_rule_families(r);
  register_linear_attn_family(r);
  register_retnet_family(r);
  register_gla_family(r);
  register_mamba2_family(r);
}

}  // namespace mnemo
