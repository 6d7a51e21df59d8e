// CUDA kernels and launchers of the fused gated-linear-attention chunk kernel: each kernel is one call of the
// block function in chunk_kernel.cuh (the code the CPU tests run over a sequential grid), one block per
// (sequence, head, value tile).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/gla/chunk_kernel.cuh"

namespace mnemo::gla_kernel {
namespace {

constexpr int kThreads = 256;

template <class E, class Acc>
__global__ void __launch_bounds__(kThreads) forward_kernel(Problem p, ForwardPointers ptr) {
  extern __shared__ __align__(16) unsigned char shared[];
  forward_block<E, Acc>(p, ptr, blockIdx.x, shared, grid::Lanes{static_cast<int>(threadIdx.x),
                                                                 static_cast<int>(blockDim.x)});
}

template <class E, class Acc>
__global__ void __launch_bounds__(kThreads) backward_kernel(Problem p, BackwardPointers ptr) {
  extern __shared__ __align__(16) unsigned char shared[];
  backward_block<E, Acc>(p, ptr, blockIdx.x, shared, grid::Lanes{static_cast<int>(threadIdx.x),
                                                                  static_cast<int>(blockDim.x)});
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("gla chunk kernel: ") + what + ": " + cudaGetErrorString(status));
}

template <class Kernel, class Pointers>
void launch(Kernel kernel, const Problem& p, const Pointers& ptr, std::size_t bytes, void* stream) {
  const int64_t n = blocks(p);
  if (n == 0) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "shared memory size");
  kernel<<<static_cast<unsigned>(n), kThreads, bytes, static_cast<cudaStream_t>(stream)>>>(p, ptr);
  check(cudaGetLastError(), "launch");
}

bool is_fp64(Element e) { return e == Element::kFloat64; }

}  // namespace

std::size_t device_shared_limit() {
  int device = 0, bytes = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "shared memory limit");
  return static_cast<std::size_t>(bytes);
}

Tiling device_tiling(const Problem& problem, Element element) {
  const std::size_t limit = device_shared_limit();
  const int candidates[][2] = {{64, 64}, {64, 32}, {32, 64}, {32, 32}, {16, 32}, {16, 16}, {8, 16}, {8, 8}};
  Problem p = problem;
  for (const auto& cv : candidates) {
    p.tiling = Tiling{cv[0], cv[0] < 16 ? cv[0] : 16, cv[1]};
    const std::size_t need = is_fp64(element)
                                 ? std::max(shared_bytes<double>(p, false), shared_bytes<double>(p, true))
                                 : std::max(shared_bytes<float>(p, false), shared_bytes<float>(p, true));
    if (need > limit) continue;
    // Fewer blocks than multiprocessors leaves the device idle: narrower value tiles give more blocks (each
    // recomputes the chunk's A, which is cheap next to the idle SMs).
    int device = 0, sms = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    while (blocks(p) < sms && p.tiling.tile_v > 16) p.tiling.tile_v /= 2;
    return p.tiling;
  }
  throw std::runtime_error("gla chunk kernel: key dim " + std::to_string(problem.key_dim) +
                           " does not fit the device's shared memory at any tiling");
}

void launch_forward(const Problem& p, const ForwardPointers& ptr, Element element, void* stream) {
  switch (element) {
    case Element::kFloat32:
      launch(forward_kernel<float, float>, p, ptr, shared_bytes<float>(p, false), stream);
      break;
    case Element::kBFloat16:
      launch(forward_kernel<grid::bf16, float>, p, ptr, shared_bytes<float>(p, false), stream);
      break;
    case Element::kFloat64:
      launch(forward_kernel<double, double>, p, ptr, shared_bytes<double>(p, false), stream);
      break;
  }
}

void launch_backward(const Problem& p, const BackwardPointers& ptr, Element element, void* stream) {
  switch (element) {
    case Element::kFloat32:
      launch(backward_kernel<float, float>, p, ptr, shared_bytes<float>(p, true), stream);
      break;
    case Element::kBFloat16:
      launch(backward_kernel<grid::bf16, float>, p, ptr, shared_bytes<float>(p, true), stream);
      break;
    case Element::kFloat64:
      launch(backward_kernel<double, double>, p, ptr, shared_bytes<double>(p, true), stream);
      break;
  }
}

}  // namespace mnemo::gla_kernel
