#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames retnet_fla_names();  // fla "retnet" -> retnet
}  // namespace mnemo
