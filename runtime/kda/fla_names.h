#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames kda_fla_names();  // fla "kda" -> kda
}  // namespace mnemo
