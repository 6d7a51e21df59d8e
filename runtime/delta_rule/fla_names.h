#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames deltanet_fla_names();        // fla "delta_net" -> deltanet
FlaMixerNames gated_deltanet_fla_names();  // fla "gated_deltanet" -> gated_deltanet
}  // namespace mnemo
