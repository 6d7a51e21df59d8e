// Processes on this host (run rows record the pid and host of the process that trains them).
#pragma once
#include <cstdint>

namespace mnemo {

bool process_alive(int64_t pid);  // a process with this id runs on this host (kill(pid, 0); a zombie is not alive)

}  // namespace mnemo
