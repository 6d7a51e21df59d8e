// `mnemo bench --profile FILE`: the PyTorch profiler (Kineto) around a benchmark, and where the time went.
//
// Profiled: the timed repetitions of every measurement (BenchOptions::on_timed), not set-up or warm-up; the
// times a profiled bench prints carry the profiler's overhead. Two tables, summed over those repetitions:
//  - host: each operator's *self* time on the host (its span minus its nested operators' spans, per thread);
//    CUDA runtime calls (cudaLaunchKernel, ...) are counted apart, as one line. On a GPU a large host share
//    with a small device share means the step is launch-bound.
//  - device (CUDA only): each kernel's time, attributed to the operator that launched it (the kernel's linked
//    correlation id = the launching operator's correlation id, as torch.profiler's key_averages does), and
//    the kernels themselves by name.
// `--profile-trace FILE` also saves the chrome trace of the first profiled measurement (chrome://tracing, Perfetto);
// that needs a LibTorch built with Kineto (the GPU machines' torch 2.x; Debian's 1.13 has none: an error).
#pragma once
#include <functional>
#include <map>
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
  // Host operators, plus CUDA kernels when `device` is CUDA. Nothing is recorded until resume().
  explicit OpProfiler(const torch::Device& device);
  ~OpProfiler();  // stops the profiler if a section is open (an exception in the benchmark)
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void resume();  // starts recording a section
  void pause();   // ends it and adds its events to the tables
  const OpProfileTables& tables();  // the tables so far, sorted
  // The chrome trace of the first section to `path` (write-then-rename); Error naming the path if it cannot be saved.
  void save_trace(const std::string& path);

 private:
  torch::Device device_;
  bool running_ = false;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> first_;
  std::map<std::string, OpTime> host_, device_by_op_, kernels_;
  OpProfileTables tables_;
};

// Brackets the timed repetitions of one measurement for a BenchOptions::on_timed hook: before(i, warmup) at the
// top of each repetition waits for the device and opens the section at the first timed one (warm-up work stays
// out); end() after the loop closes it (the hook waits for the device itself: OpProfiler::pause).
class TimedSection {
 public:
  TimedSection(const std::function<void(bool)>& hook, const torch::Device& device) : hook_(hook), device_(device) {}
  void before(int64_t i, int64_t warmup);
  void end();

 private:
  const std::function<void(bool)>& hook_;
  torch::Device device_;
  bool open_ = false;
};

// The tables as text, `top` lines each, with shares of the host / device totals.
std::string format_profile(const OpProfileTables& t, int top);

}  // namespace mnemo
