#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames rwkv7_fla_names();  // fla "rwkv7": known, refused (see fla_names.cpp)
}  // namespace mnemo
