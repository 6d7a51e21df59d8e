#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames rwkv7_fla_names();  // fla "rwkv7" (see fla_names.cpp)
}  // namespace mnemo
