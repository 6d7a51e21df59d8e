// CUDA wrappers of the fused delta-rule chunk kernels: each block runs chunk_kernel.cuh's block function with its
// threads as Lanes and the dynamic shared memory (or, for a layout past kMaxSharedBytes, its slice of a global
// workspace) as the tiles.
#include <cuda_runtime.h>

#include "runtime/delta_rule/chunk_kernel.h"

namespace mnemo::delta_rule_kernel {

namespace {

template <class T, class Acc>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs<T, Acc> args, unsigned char* workspace,
                                                           std::size_t block_bytes) {
  extern __shared__ __align__(16) unsigned char shared[];
  void* tiles = workspace ? workspace + static_cast<std::size_t>(blockIdx.x) * block_bytes : shared;
  forward_block<T, Acc>(args, blockIdx.x, tiles, grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});
}

template <class T, class Acc>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs<T, Acc> args, unsigned char* workspace,
                                                            std::size_t block_bytes) {
  extern __shared__ __align__(16) unsigned char shared[];
  void* tiles = workspace ? workspace + static_cast<std::size_t>(blockIdx.x) * block_bytes : shared;
  backward_block<T, Acc>(args, blockIdx.x, tiles, grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});
}

// Launches `kernel` with `block_bytes` of tiles: dynamic shared memory (opting in above 48 KiB) when they fit,
// else the workspace.
template <class Kernel, class Args>
const char* launch(Kernel kernel, const Args& args, std::size_t block_bytes, void* workspace, void* stream) {
  const int blocks = args.p.blocks();
  if (blocks == 0) return nullptr;
  const bool in_shared = block_bytes <= kMaxSharedBytes;
  if (!in_shared && workspace == nullptr) return "delta rule kernel: a workspace is required for this tile size";
  const std::size_t dynamic = in_shared ? block_bytes : 0;
  if (dynamic > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  kernel<<<blocks, kThreads, dynamic, static_cast<cudaStream_t>(stream)>>>(
      args, in_shared ? nullptr : static_cast<unsigned char*>(workspace), block_bytes);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch_forward(const ForwardLaunch& l, void* workspace, void* stream) {
  return with_types(l.dtype, [&](auto types) {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    return launch(forward_kernel<T, Acc>, typed_args<T, Acc>(l), forward_shared_bytes<Acc>(l.p), workspace, stream);
  });
}

const char* launch_backward(const BackwardLaunch& l, void* workspace, void* stream) {
  return with_types(l.dtype, [&](auto types) {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    return launch(backward_kernel<T, Acc>, typed_args<T, Acc>(l), backward_shared_bytes<Acc>(l.p), workspace, stream);
  });
}

}  // namespace mnemo::delta_rule_kernel
