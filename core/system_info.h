// Machine/library facts printed by `mnemo --version` and recorded with every benchmark.
#pragma once
#include <string>

#include "core/common.h"

namespace mnemo {

// Intra-op threads: $MNEMO_THREADS, else $OMP_NUM_THREADS, else the cores other work is not using at start
// (the core count less the one-minute load average, at least 1), so a second process on a busy machine slows
// down by its share instead of collapsing. A set value that is not a positive integer ("abc", "0", "-2") throws
// Error naming the variable. threads_description() says where the count came from.
void configure_threads();
std::string threads_description();
// max(1, cores - round(one-minute load average)); the load through *load_out when given.
int idle_cores(int cores, double* load_out = nullptr);
// glibc malloc settings for LibTorch's CPU tensors (keep freed blocks instead of mmap/munmap per op);
// MNEMO_MALLOC_TUNING=0 or the user's own MALLOC_*_ / GLIBC_TUNABLES leave glibc's defaults alone.
void configure_allocator();
std::string allocator_description();
// Flush subnormal floats to zero on the CPU (FTZ/DAZ) unless MNEMO_FLUSH_DENORMAL=0; call before the first
// parallel region (threads created later inherit it). The description says which.
void configure_denormals();
std::string denormals_description();
std::string blas_library();  // the BLAS shared object LibTorch resolved (e.g. libopenblasp...)
std::string torch_version();
std::string git_commit();  // the commit the binary was configured from (12 hex digits) or "unknown"
bool cuda_available();
std::string version_text();
json system_json();  // {mnemo, git_commit, torch, blas, threads, cuda, host}

}  // namespace mnemo
