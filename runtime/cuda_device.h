// CUDA-only facilities behind an interface that compiles everywhere: with a CUDA LibTorch (CMake defines
// MNEMO_WITH_CUDA) they use the caching allocator's statistics and CUDA events; in a CPU-only build they report
// "unavailable" (and are never reached: resolve_device refuses cuda there).
#pragma once
#include <torch/torch.h>

#include <string>

namespace mnemo {

bool built_with_cuda();  // this binary was compiled against a CUDA LibTorch

// CUDA caching allocator, device `d`: bytes allocated now / at the peak since the last reset, in MiB.
double cuda_allocated_mb(const torch::Device& d, bool peak);
void cuda_reset_peak_memory(const torch::Device& d);

// Elapsed time of queued device work: CUDA events on the current stream for a CUDA device (the time the GPU spent
// between start() and stop(), launch gaps included), the monotonic clock after a synchronize elsewhere.
class DeviceTimer {
 public:
  explicit DeviceTimer(const torch::Device& device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start();
  double stop_seconds();  // waits for the work queued before stop()
  static std::string method(const torch::Device& device);

 private:
  torch::Device device_;
  double t0_ = 0;
  struct Events;
  Events* events_ = nullptr;
};

}  // namespace mnemo
