#include "runtime/cuda_device.h"

#include <chrono>

#include "core/common.h"

#ifdef MNEMO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mnemo {

namespace {
double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
#ifdef MNEMO_WITH_CUDA
c10::DeviceIndex index_of(const torch::Device& d) { return d.has_index() ? d.index() : c10::DeviceIndex(0); }
#endif
}  // namespace

#ifdef MNEMO_WITH_CUDA
bool built_with_cuda() { return true; }

// Index 0 of the statistics arrays is StatType::AGGREGATE in every LibTorch version.
double cuda_allocated_mb(const torch::Device& d, bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(d));
  return static_cast<double>(peak ? stats.allocated_bytes[0].peak : stats.allocated_bytes[0].current) /
         (1024.0 * 1024.0);
}

void cuda_reset_peak_memory(const torch::Device& d) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(d));
}

struct DeviceTimer::Events {
  at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};  // timing-enabled events
};

DeviceTimer::DeviceTimer(const torch::Device& device) : device_(device) {
  if (device_.is_cuda()) events_ = new Events();
}
DeviceTimer::~DeviceTimer() { delete events_; }

void DeviceTimer::start() {
  if (events_) {
    const c10::cuda::CUDAGuard guard(index_of(device_));
    events_->begin.record();
  } else {
    t0_ = monotonic_s();
  }
}

double DeviceTimer::stop_seconds() {
  if (!events_) return monotonic_s() - t0_;
  const c10::cuda::CUDAGuard guard(index_of(device_));
  events_->end.record();
  events_->end.synchronize();
  return static_cast<double>(events_->begin.elapsed_time(events_->end)) / 1e3;
}

std::string DeviceTimer::method(const torch::Device& device) {
  return device.is_cuda() ? "CUDA events on the current stream" : "monotonic clock";
}
#else
bool built_with_cuda() { return false; }
double cuda_allocated_mb(const torch::Device&, bool) { return NAN; }
void cuda_reset_peak_memory(const torch::Device&) {}

struct DeviceTimer::Events {};
DeviceTimer::DeviceTimer(const torch::Device& device) : device_(device) {
  if (device_.is_cuda()) throw Error("this mnemo was built without CUDA (LibTorch CPU)");
}
DeviceTimer::~DeviceTimer() = default;
void DeviceTimer::start() { t0_ = monotonic_s(); }
double DeviceTimer::stop_seconds() { return monotonic_s() - t0_; }
std::string DeviceTimer::method(const torch::Device&) { return "monotonic clock"; }
#endif

}  // namespace mnemo
