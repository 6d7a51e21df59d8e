#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames forgetting_transformer_fla_names();  // fla "forgetting_transformer" -> fox
}  // namespace mnemo
