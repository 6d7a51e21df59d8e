#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames log_linear_mamba2_fla_names();  // fla "log_linear_mamba2" <-> log_linear_mamba2 (see fla_names.cpp)
}  // namespace mnemo
