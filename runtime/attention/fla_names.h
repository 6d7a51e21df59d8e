#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames attention_fla_names();  // fla "transformer" -> transformer / swa
}  // namespace mnemo
