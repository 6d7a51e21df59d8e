// The one place where mnemo's sources differ between LibTorch versions: Debian's 1.13 (CPU, CI) and the GPU
// machines' 2.x (CUDA). Everything else is written against the API both share.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef MNEMO_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#define MNEMO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::scaled_dot_product_attention (flash / memory-efficient backends on CUDA): a public API from 2.1
// (docs/models.md#implementation-notes).
#define MNEMO_HAS_SDPA MNEMO_TORCH_AT_LEAST(2, 1)

namespace mnemo::torch_compat {

#ifdef MNEMO_WITH_CUDA
// The current CUDA stream of `device` as the void* the torch-free kernel launchers take (a cudaStream_t).
inline void* current_cuda_stream(const c10::Device& device) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
}
#endif

// Autocast state of one device type (CPU or CUDA) on the calling thread. 2.4 made the API per device type;
// 1.13 has one switch per device type under other names.
inline bool autocast_enabled(c10::DeviceType type) {
#if MNEMO_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType type) {
#if MNEMO_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast(c10::DeviceType type, bool enabled, at::ScalarType dtype) {
#if MNEMO_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

// A profiler event's start and duration (torch::autograd::profiler::KinetoEvent, engine/tools/op_profile.cpp): 1.13 has
// startUs()/durationUs(), newer versions startNs()/durationNs(). Chosen by which member exists, in nanoseconds.
template <class Event>
auto event_start_ns(const Event& e, int) -> decltype(static_cast<uint64_t>(e.startNs())) {
  return e.startNs();
}
template <class Event>
uint64_t event_start_ns(const Event& e, long) {
  return e.startUs() * 1000;
}
template <class Event>
auto event_duration_ns(const Event& e, int) -> decltype(static_cast<uint64_t>(e.durationNs())) {
  return e.durationNs();
}
template <class Event>
uint64_t event_duration_ns(const Event& e, long) {
  return e.durationUs() * 1000;
}
template <class Event>
uint64_t event_start_ns(const Event& e) {
  return event_start_ns(e, 0);
}
template <class Event>
uint64_t event_duration_ns(const Event& e) {
  return event_duration_ns(e, 0);
}

}  // namespace mnemo::torch_compat

// c10d (engine/training/distributed.cpp): a process group's collectives live on c10d::ProcessGroup in 1.13; from 2.0 each
// backend (ProcessGroupGloo, ProcessGroupNCCL) is a c10d::Backend beneath a dispatching ProcessGroup.
#define MNEMO_C10D_HAS_BACKEND_CLASS MNEMO_TORCH_AT_LEAST(2, 0)
