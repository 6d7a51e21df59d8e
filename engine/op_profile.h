// `mnemo bench --profile FILE`: the PyTorch profiler (Kineto) around a benchmark, and where the time went.
//
// Two tables, summed over the whole bench run (model set-up, warm-up and timed repetitions):
//  - host: each operator's *self* time on the host (its span minus its nested operators' spans, per thread);
//    CUDA runtime calls (cudaLaunchKernel, ...) are counted apart, as one line. On a GPU a large host share
//    with a small device share means the step is launch-bound.
//  - device (CUDA only): each kernel's time, attributed to the operator that launched it (the kernel's linked
//    correlation id = the launching operator's correlation id, as torch.profiler's key_averages does), and
//    the kernels themselves by name.
// `--profile-trace FILE` also saves the chrome trace (chrome://tracing, Perfetto); that needs a LibTorch built with
// Kineto (the GPU machines' torch 2.x; Debian's 1.13 has none, and saying so is an error).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

namespace mnemo {

// One line of a profile table.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
};

struct OpProfileTables {
  std::vector<OpTime> host_self;         // by operator, descending
  OpTime cuda_runtime{"CUDA runtime calls"};
  std::vector<OpTime> device_by_op;      // kernel time by launching operator, descending (CUDA only)
  std::vector<OpTime> device_kernels;    // by kernel name, descending (CUDA only)
  double host_total_ms = 0, device_total_ms = 0;
};

class OpProfiler {
 public:
  // Starts the profiler: host operators, plus CUDA kernels when `device` is CUDA.
  explicit OpProfiler(const torch::Device& device);
  ~OpProfiler();  // stops the profiler if finish() was not reached (an exception in the benchmark)
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Stops and returns the tables.
  OpProfileTables finish();
  // After finish(): the chrome trace to `path` (write-then-rename); Error naming the path if it cannot be saved.
  void save_trace(const std::string& path);

 private:
  bool cuda_ = false;
  bool running_ = false;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result_;
};

// The tables as text, `top` lines each, with shares of the host / device totals.
std::string format_profile(const OpProfileTables& t, int top);

}  // namespace mnemo
