#include "core/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace mnemo {

bool process_alive(int64_t pid) {
  if (pid <= 0) return false;
  if (!(::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) return false;
  // A zombie (ended, not yet reaped by its parent) still answers kill(pid, 0): its state in /proc says 'Z'.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

}  // namespace mnemo
