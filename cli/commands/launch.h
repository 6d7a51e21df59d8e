// Local data-parallel launcher (`mnemo train --nproc N`), cli/commands/launch.cpp.
#pragma once
#include <string>
#include <vector>

namespace mnemo::cli {

// This process's argv (from /proc/self/cmdline).
std::vector<std::string> own_command_line();
// `args` without `name VALUE` and `name=VALUE`.
std::vector<std::string> without_option(const std::vector<std::string>& args, const std::string& name);
// The most local ranks --nproc starts: 4 per core (each rank is a whole process with its own copy of the model
// and its own threads; beyond that the ranks only take turns on the cores), and at least 4.
int max_local_ranks();
// Refuses an --nproc outside [1, max_local_ranks()] with the reason (Error).
void check_nproc(int nproc);
// Runs `rank_args` (argv; argv[0] is replaced by this binary) as `nproc` local ranks and waits for them. Returns 0
// when every rank succeeded, 128 + signal after a forwarded SIGINT / SIGTERM; a failed rank -> Error naming it,
// after the others were given `grace_s` seconds to stop on their own (then SIGTERM, then SIGKILL). Before any rank
// starts: check_nproc, and MASTER_PORT (when set) must be a port number that is free on 127.0.0.1.
int launch_local_ranks(int nproc, const std::vector<std::string>& rank_args, double grace_s);

}  // namespace mnemo::cli
