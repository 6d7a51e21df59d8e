// CUDA wrappers of the Lattice scan kernel: one kernel a pass, whose blocks ((batch, head) each) run the block
// function of scan_kernel.cuh with their threads as Lanes; intermediates live in the launch's global workspace
// (ForwardArgs::work, BackwardArgs::work), so no dynamic shared memory is used.
#include <cuda_runtime.h>

#include "runtime/lattice/scan_kernel.h"

namespace mnemo::lattice_kernel {

namespace {

template <class Acc>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs<Acc> args) {
  forward_block<Acc>(args, blockIdx.x, nullptr, grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});
}

template <class Acc>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs<Acc> args) {
  backward_block<Acc>(args, blockIdx.x, nullptr, grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});
}

template <class Kernel, class Args>
const char* launch_kernel(Kernel kernel, const Args& args, int64_t blocks, void* stream) {
  if (blocks == 0) return nullptr;
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch(const ForwardArgs<float>& a, void* stream) {
  return launch_kernel(forward_kernel<float>, a, a.z.blocks, stream);
}
const char* launch(const ForwardArgs<double>& a, void* stream) {
  return launch_kernel(forward_kernel<double>, a, a.z.blocks, stream);
}
const char* launch(const BackwardArgs<float>& a, void* stream) {
  return launch_kernel(backward_kernel<float>, a, a.x.z.blocks, stream);
}
const char* launch(const BackwardArgs<double>& a, void* stream) {
  return launch_kernel(backward_kernel<double>, a, a.x.z.blocks, stream);
}

}  // namespace mnemo::lattice_kernel
