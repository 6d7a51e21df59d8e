#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
// fla "gla" -> gla, and the parts fla's "retnet" shares with it (runtime/retnet/fla_names.cpp): the checks and keys
// of q/k/v, expand_k/expand_v and the gated output norm.
FlaMixerNames gla_fla_names();
json gla_family_fla_defaults();
int64_t gla_family_fla_keys(const FlaConfigView& c, json& keys);  // returns the key head dim
void gla_family_fla_mixer_keys(const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map);
}  // namespace mnemo
