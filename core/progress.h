// Progress output helpers shared by long-running commands and reports.
#pragma once
#include <string>

namespace mnemo {

// 42 -> "42s", 125 -> "2m05s", 7300 -> "2h01m".
std::string format_duration(double seconds);

}  // namespace mnemo
