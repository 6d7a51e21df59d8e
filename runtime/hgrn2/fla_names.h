#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames hgrn2_fla_names();  // fla "hgrn2" -> hgrn2
}  // namespace mnemo
