#include "core/system_info.h"
#include "core/parse_int.h"

#ifdef MNEMO_GIT_COMMIT_HEADER
#include MNEMO_GIT_COMMIT_HEADER  // generated at build time: #define MNEMO_GIT_COMMIT "<hash>[+dirty]"
#endif
#ifndef MNEMO_GIT_COMMIT
#define MNEMO_GIT_COMMIT "unknown"
#endif

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mnemo {

namespace {
// A thread-count variable: unset or empty -> 0 (not given); a positive integer -> it; anything else is an Error.
int thread_count_from_env(const char* name) {
  const char* e = std::getenv(name);
  if (!e || !*e) return 0;
  const std::string text = e;
  const auto n = parse_whole_int(text);
  if (!n || *n < 1 || *n > 4096)
    throw Error(std::string("$") + name + " must be a positive integer (threads, at most 4096), got '" + text + "'");
  return static_cast<int>(*n);
}
}  // namespace

namespace {
std::string g_threads_reason = "not configured";
}  // namespace

// The cores that other work is not already using, by the one-minute load average (at least 1). Two processes that
// each take every core make each OpenMP region wait for a descheduled thread of its own team at every barrier:
// measured on 2 cores with two other busy processes, a 20-step `train --model swla --set d_model=32` took over
// 120 s with 2 threads (spinning or passive waiting alike) and 23.5 s with 1 (docs/performance.md).
int idle_cores(int cores, double* load_out) {
  double load[1] = {0.0};
  if (getloadavg(load, 1) != 1) load[0] = 0.0;
  if (load_out) *load_out = load[0];
  const int busy = static_cast<int>(load[0] + 0.5);
  return std::max(1, cores - busy);
}

void configure_threads() {
  int n = thread_count_from_env("MNEMO_THREADS");
  if (n > 0) g_threads_reason = "$MNEMO_THREADS";
  // OpenMP's own variable keeps OpenMP's lenient reading ("4,2" is a nested list: its first entry counts).
  if (const char* o = std::getenv("OMP_NUM_THREADS"); n == 0 && o && *o) {
    n = std::atoi(o);
    g_threads_reason = "$OMP_NUM_THREADS";
  }
  if (n <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    double load = 0.0;
    n = idle_cores(cores, &load);
    std::ostringstream why;
    why.precision(2);
    why << std::fixed << "the idle cores: " << cores << " cores, load average " << load
        << " at start ($MNEMO_THREADS sets a number)";
    g_threads_reason = why.str();
  }
  at::set_num_threads(n);
}

std::string threads_description() { return g_threads_reason; }

namespace {
std::string g_allocator = "default";
}

// LibTorch 1.13 on CPU has no caching allocator: every intermediate tensor is a malloc/free. With
// glibc's defaults, blocks above the (dynamic) mmap threshold are mmap'ed and unmapped each time and
// the heap top is trimmed back to the kernel, so every op page-faults fresh zeroed pages (measured:
// 60 % system time in training; transformer forward at T = 2048 3.5x slower). Keeping freed memory in
// the heap removes that; it needs the three settings together (measured: the mmap threshold alone, or
// trim threshold + top pad without it, were slower than glibc's defaults).
void configure_allocator() {
#if defined(__GLIBC__)
  if (const char* e = std::getenv("MNEMO_MALLOC_TUNING"); e && std::string(e) == "0") {
    g_allocator = "glibc defaults (MNEMO_MALLOC_TUNING=0)";
    return;
  }
  for (const char* user : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (std::getenv(user)) {
      g_allocator = std::string("glibc, user settings ($") + user + ")";
      return;
    }
  const bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
                  mallopt(M_TOP_PAD, 256 << 20) == 1;
  g_allocator = ok ? "glibc malloc, tuned (mmap threshold 32 MiB, no trim, top pad 256 MiB)"
                   : "glibc malloc (mallopt refused the tuning)";
#else
  g_allocator = "system malloc";
#endif
}

std::string allocator_description() { return g_allocator; }

namespace {
std::string g_denormals = "kept (IEEE gradual underflow)";
}

// Subnormal fp32 values (below 1.2e-38: softmax probabilities of far keys, their products in a backward) take
// microcode assists on Intel cores, ~100x slower per operation (measured: Titans MAC's training step 1.55 s with
// them, 0.95 s flushed, on a Xeon (Skylake-X) here). Flushing them to zero (MXCSR FTZ/DAZ, PyTorch's
// set_flush_denormal) changes values below 1.2e-38 only. Set before the first parallel region, so the OpenMP
// threads created later inherit it.
void configure_denormals() {
  if (const char* e = std::getenv("MNEMO_FLUSH_DENORMAL"); e && std::string(e) == "0") {
    g_denormals = "kept (MNEMO_FLUSH_DENORMAL=0)";
    return;
  }
  g_denormals = at::globalContext().setFlushDenormal(true) ? "flushed to zero (FTZ/DAZ)"
                                                           : "kept (this CPU cannot flush them)";
}

std::string denormals_description() { return g_denormals; }

std::string blas_library() {
  // The BLAS LibTorch actually resolved at load time (Debian: the libblas.so.3 alternative).
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    auto pos = line.find('/');
    if (pos == std::string::npos) continue;
    std::string path = line.substr(pos);
    std::string lower = path;
    for (auto& c : lower) c = static_cast<char>(std::tolower(c));
    if (lower.find("cublas") != std::string::npos) continue;  // the GPU's BLAS, not the CPU one
    if (lower.find("blas") != std::string::npos || lower.find("mkl") != std::string::npos) {
      if (found.find(path) == std::string::npos) found += (found.empty() ? "" : ", ") + path;
    }
  }
  if (found.empty()) return "no separate BLAS library mapped (linked into LibTorch, as in the pip wheels)";
  std::string lower = found;
  for (auto& c : lower) c = static_cast<char>(std::tolower(c));
  std::string kind = lower.find("openblas") != std::string::npos ? "OpenBLAS"
                     : lower.find("mkl") != std::string::npos    ? "MKL"
                                                                 : "reference BLAS (slow!)";
  return kind + " (" + found + ")";
}

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

bool cuda_available() { return torch::cuda::is_available(); }

json system_json() {
  return json{{"mnemo", MNEMO_VERSION},
              {"git_commit", MNEMO_GIT_COMMIT},
              {"torch", torch_version()},
              {"blas", blas_library()},
              {"threads", at::get_num_threads()},
              {"allocator", allocator_description()},
              {"denormals", denormals_description()},
              {"cuda", cuda_available()},
              {"cuda_devices", cuda_available() ? torch::cuda::device_count() : 0},
              {"host", hostname()}};
}

std::string git_commit() { return MNEMO_GIT_COMMIT; }

std::string version_text() {
  std::ostringstream s;
  s << "mnemo " << MNEMO_VERSION << " (git " << MNEMO_GIT_COMMIT << ")\n"
    << "LibTorch " << torch_version() << "\n"
    << "BLAS: " << blas_library() << "\n"
    << "intra-op threads: " << at::get_num_threads() << " (" << g_threads_reason << ")\n"
    << "CPU allocator: " << allocator_description() << "\n"
    << "denormals: " << denormals_description() << "\n"
    << "CUDA: "
    << (cuda_available() ? "available, " + std::to_string(torch::cuda::device_count()) + " device(s)"
                         : std::string("not available"))
    << "\n"
    << "data dir: " << data_dir() << "\n";
  return s.str();
}

}  // namespace mnemo
