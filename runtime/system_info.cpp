#include "runtime/system_info.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace mnemo {

void configure_threads() {
  int n = 0;
  if (const char* e = std::getenv("MNEMO_THREADS"); e && *e) n = std::atoi(e);
  else if (const char* o = std::getenv("OMP_NUM_THREADS"); o && *o) n = std::atoi(o);
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
}

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
    if (lower.find("blas") != std::string::npos || lower.find("mkl") != std::string::npos) {
      if (found.find(path) == std::string::npos) found += (found.empty() ? "" : ", ") + path;
    }
  }
  if (found.empty()) return "unknown (no BLAS library mapped)";
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
    << "intra-op threads: " << at::get_num_threads() << "\n"
    << "CUDA: "
    << (cuda_available() ? "available, " + std::to_string(torch::cuda::device_count()) + " device(s)"
                         : std::string("not available"))
    << "\n"
    << "data dir: " << data_dir() << "\n";
  return s.str();
}

}  // namespace mnemo
