#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames mamba3_fla_names();  // fla "mamba3" -> mamba3
}  // namespace mnemo
