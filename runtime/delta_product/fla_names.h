#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames gated_deltaproduct_fla_names();  // fla "gated_deltaproduct" -> gated_deltaproduct
}  // namespace mnemo
