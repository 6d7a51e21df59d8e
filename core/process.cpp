#include "core/process.h"

#include <signal.h>

#include <cerrno>

namespace mnemo {

bool process_alive(int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace mnemo
