// `mnemo train --nproc N`: N local ranks of the same command, as torchrun's standalone mode starts them — each a
// child process of this one with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT. The
// launcher forwards SIGINT / SIGTERM, and when a rank fails it gives the others a bounded time to fail on their own
// (a collective with a dead peer errors at once) before stopping them, then says which rank failed and how.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "cli/commands/launch.h"
#include "core/common.h"
#include "core/parse_int.h"
#include "core/signals.h"

namespace mnemo::cli {

namespace {

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("--nproc: cannot open a socket (") + std::strerror(errno) + ")");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw Error(std::string("--nproc: cannot find a free port on 127.0.0.1 (") + std::strerror(errno) + ")");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// MASTER_PORT as given: a whole number in [1, 65535] that nothing on 127.0.0.1 listens on (bound and released
// here; the ranks' rendezvous would otherwise wait out its timeout on a port in use).
int checked_master_port(const std::string& text) {
  const auto value = parse_whole_int(text);
  if (!value || *value < 1 || *value > 65535)
    throw Error("--nproc: MASTER_PORT='" + text_excerpt(text, 40) + "' is not a port number (an integer in [1, 65535]); "
                "unset it to let --nproc pick a free port");
  const int port = static_cast<int>(*value);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("--nproc: cannot open a socket (") + std::strerror(errno) + ")");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    throw Error("--nproc: MASTER_PORT " + std::to_string(port) + " cannot be used on 127.0.0.1 (" + std::strerror(err) +
                "); choose another, or unset MASTER_PORT to let --nproc pick a free one");
  return port;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + (strsignal(sig) ? strsignal(sig) : "?") +
           ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

std::vector<std::string> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(f, arg, '\0')) args.push_back(arg);
  if (args.empty()) throw Error("--nproc: cannot read this process's command line (/proc/self/cmdline)");
  return args;
}

std::vector<std::string> without_option(const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind(name + "=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

int max_local_ranks() { return static_cast<int>(std::max(4u, 4 * std::thread::hardware_concurrency())); }

void check_nproc(int nproc) {
  if (nproc < 1) throw Error("--nproc must be >= 1, got " + std::to_string(nproc) + " (leave it out for one process)");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (nproc > max_local_ranks())
    throw Error("--nproc " + std::to_string(nproc) + " is more than " + std::to_string(max_local_ranks()) +
                " local ranks (4 per core; this machine has " + std::to_string(cores) +
                "): each rank is a whole process with its own model and threads, so more only take turns on the "
                "cores");
}

int launch_local_ranks(int nproc, const std::vector<std::string>& rank_args, double grace_s) {
  check_nproc(nproc);
  for (const char* k : {"RANK", "WORLD_SIZE"})
    if (std::getenv(k)) throw Error(std::string("--nproc starts its own ranks, but ") + k + " is already set");
  const char* port_env = std::getenv("MASTER_PORT");
  const int port = port_env && *port_env ? checked_master_port(port_env) : free_local_port();
  // Each rank's share of the cores, unless the user chose a thread count.
  const bool threads_given = std::getenv("OMP_NUM_THREADS") || std::getenv("MNEMO_THREADS");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::max(1u, cores / static_cast<unsigned>(nproc)));

  install_stop_handlers();
  std::vector<pid_t> pids(nproc, -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("--nproc: fork failed (") + std::strerror(errno) + ")");
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      if (!threads_given) ::setenv("OMP_NUM_THREADS", threads.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : rank_args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "mnemo: error: rank %d: cannot start %s (%s)\n", r, rank_args[0].c_str(), std::strerror(errno));
      ::_exit(127);
    }
    pids[r] = pid;
  }

  // Wait for the ranks. The first failure starts the clock: after grace_s the rest get SIGTERM, 10 s later SIGKILL.
  int running = nproc, first_failed = -1, first_status = 0, exit_code = 0;
  bool forwarded = false, terminated = false, killed = false;
  double failed_at = 0;
  while (running > 0) {
    if (stop_requested() && !forwarded) {  // pass a Ctrl-C / SIGTERM to the ranks (they checkpoint and stop)
      for (pid_t p : pids)
        if (p > 0) ::kill(p, stop_signal());
      forwarded = true;
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (int r = 0; r < nproc; ++r)
        if (pids[r] == done) {
          pids[r] = -1;
          --running;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && first_failed < 0 && !(forwarded && WIFEXITED(status) && WEXITSTATUS(status) >= 128)) {
            first_failed = r, first_status = status, failed_at = wall_seconds();
            std::fprintf(stderr, "mnemo: rank %d (pid %d) %s; waiting up to %.0f s for the other ranks to stop\n", r,
                         int(done), describe_status(status).c_str(), grace_s);
          }
          if (!ok && exit_code == 0) exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
      continue;
    }
    if (first_failed >= 0 && !terminated && wall_seconds() - failed_at > grace_s) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      terminated = true;
    }
    if (terminated && !killed && wall_seconds() - failed_at > grace_s + 10) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      killed = true;
    }
    ::usleep(50 * 1000);
  }
  if (first_failed >= 0)
    throw Error("rank " + std::to_string(first_failed) + " of " + std::to_string(nproc) + " " +
                describe_status(first_status) + "; the job stopped (its own message is above)");
  if (forwarded) return 128 + stop_signal();
  return exit_code;
}

}  // namespace mnemo::cli
