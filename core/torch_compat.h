// The one place where mnemo's sources differ between LibTorch versions: Debian's 1.13 (CPU, CI) and the GPU
// machines' 2.x (CUDA). Everything else is written against the API both share.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <vector>
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

// One AdamW step over a list of parameters as one multi-tensor kernel (at::_fused_adamw_, CUDA and CPU from 2.4):
// the update of torch::optim::AdamW — p ← p(1 − lr·wd) − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε), m and v
// the running moments — with `steps` the per-parameter step counts as float scalars on the parameters' device,
// incremented here. Returns false (nothing done) where LibTorch has no such kernel.
inline bool fused_adamw_step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                             const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                             const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2,
                             double weight_decay, double eps) {
#if MNEMO_TORCH_AT_LEAST(2, 4)
  at::_foreach_add_(steps, 1.0);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                    /*amsgrad=*/false, /*maximize=*/false);
  return true;
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1, (void)beta2,
      (void)weight_decay, (void)eps;
  return false;
#endif
}
inline constexpr bool has_fused_adamw() { return MNEMO_TORCH_AT_LEAST(2, 4); }

}  // namespace mnemo::torch_compat

// c10d (engine/training/distributed.cpp): a process group's collectives live on c10d::ProcessGroup in 1.13; from 2.0 each
// backend (ProcessGroupGloo, ProcessGroupNCCL) is a c10d::Backend beneath a dispatching ProcessGroup.
#define MNEMO_C10D_HAS_BACKEND_CLASS MNEMO_TORCH_AT_LEAST(2, 0)
