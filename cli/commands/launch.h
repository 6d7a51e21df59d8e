// Local data-parallel launcher (`mnemo train --nproc N`), cli/commands/launch.cpp.
#pragma once
#include <string>
#include <vector>

namespace mnemo::cli {

// This process's argv (from /proc/self/cmdline).
std::vector<std::string> own_command_line();
// `args` without `name VALUE` and `name=VALUE`.
std::vector<std::string> without_option(const std::vector<std::string>& args, const std::string& name);
// Runs `rank_args` (argv; argv[0] is replaced by this binary) as `nproc` local ranks and waits for them. Returns 0
// when every rank succeeded, 128 + signal after a forwarded SIGINT / SIGTERM; a failed rank -> Error naming it,
// after the others were given `grace_s` seconds to stop on their own (then SIGTERM, then SIGKILL).
int launch_local_ranks(int nproc, const std::vector<std::string>& rank_args, double grace_s);

}  // namespace mnemo::cli
