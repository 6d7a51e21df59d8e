#include "core/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <string>

namespace mnemo {

namespace {

std::atomic<int> g_signal{0};  // lock-free on every target we build for: async-signal-safe
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free");

std::atomic<int64_t> g_first_ns{0};  // when the first signal arrived (CLOCK_MONOTONIC)
static_assert(std::atomic<int64_t>::is_always_lock_free, "the signal time must be lock-free");

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The first signal asks for a clean stop; a second one exits at once, unless it comes within a second of the first:
// one request is often delivered twice (coreutils `timeout` signals the command and its process group, a terminal's
// Ctrl-C reaches the whole foreground group), and that must not cost the checkpoint.
extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(monotonic_ns());
    return;
  }
  if (monotonic_ns() - g_first_ns.load() < 1000000000) return;  // the same request, delivered twice
  _exit(128 + sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted I/O resumes; the training loop polls the flag between steps
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }

int stop_signal() { return g_signal.load(); }

const char* stop_signal_name() {
  static thread_local std::string other;
  switch (g_signal.load()) {
    case 0: return "";
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: other = "signal " + std::to_string(g_signal.load()); return other.c_str();
  }
}

void request_stop(int signal_number) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal_number);
}

void clear_stop_request() { g_signal.store(0); }

}  // namespace mnemo
