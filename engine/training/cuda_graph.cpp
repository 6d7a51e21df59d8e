#include "engine/training/cuda_graph.h"

#include <string>

#include "core/common.h"

#ifdef MNEMO_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mnemo {

#ifdef MNEMO_WITH_CUDA

bool cuda_graphs_available() { return true; }

struct CapturedStep::Impl {
  at::cuda::CUDAGraph graph;
};

CapturedStep::CapturedStep(const std::function<void()>& step, const torch::Device& device, int warmup) {
  if (!device.is_cuda()) throw Error("CUDA graph: device " + device.str() + " is not a CUDA device");
  impl_ = std::make_unique<Impl>();
  const c10::cuda::CUDAGuard device_guard(device);
  c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device.index());
  // Capture cannot run on the legacy default stream; the warm-up runs where the capture will.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent ready;
  ready.record(caller);
  ready.block(side);
  {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    for (int i = 0; i < warmup; ++i) step();
    side.synchronize();
    // Autocast's cache of casted weights would hand the graph tensors freed after the capture.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      // Relaxed: kernels of the step may set their attributes (cudaFuncSetAttribute) while being captured.
      impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeRelaxed);
      step();
      impl_->graph.capture_end();
    } catch (const std::exception& e) {
      at::autocast::set_autocast_cache_enabled(cache);
      throw Error(std::string("CUDA graph: the step could not be captured (it must not wait for the host: no "
                              ".item(), no host copies): ") + e.what());
    }
    at::autocast::set_autocast_cache_enabled(cache);
    side.synchronize();
  }
}

void CapturedStep::replay() { impl_->graph.replay(); }

#else

bool cuda_graphs_available() { return false; }

struct CapturedStep::Impl {};

CapturedStep::CapturedStep(const std::function<void()>& /*step*/, const torch::Device& device, int /*warmup*/) {
  throw Error("CUDA graph: this mnemo is built against a LibTorch without CUDA (device " + device.str() + ")");
}

void CapturedStep::replay() {}

#endif

CapturedStep::~CapturedStep() = default;

}  // namespace mnemo
