#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <vector>

#include "core/system_info.h"

// `--require-cuda` (first argument): exit 77 — CTest's SKIP_RETURN_CODE for the cuda.* tests — when no CUDA device
// is visible, so that the CUDA tests read as skipped on a CPU machine rather than passed.
int main(int argc, char* argv[]) {
  std::vector<char*> args(argv, argv + argc);
  if (argc > 1 && std::strcmp(argv[1], "--require-cuda") == 0) {
    args.erase(args.begin() + 1);
    if (!mnemo::cuda_available()) {
      std::cout << "skipped: no CUDA device on this machine (the [cuda] tests need one)\n";
      return 77;
    }
  }
  mnemo::configure_allocator();  // the same CPU allocator and denormal settings as the mnemo binary
  mnemo::configure_denormals();
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
