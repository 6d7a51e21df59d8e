#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames path_attn_fla_names();  // fla "path_attn" -> path_attn
}  // namespace mnemo
