#pragma once
#include "runtime/fla_names.h"

namespace mnemo {
FlaMixerNames mesa_net_fla_names();  // fla "mesa_net" -> mesa_net
}  // namespace mnemo
