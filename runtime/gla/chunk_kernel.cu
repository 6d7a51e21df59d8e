// CUDA kernels and launchers of the gated-linear-attention chunk kernels: each kernel is one call of a stage's
// block function in chunk_kernel.cuh (the code the CPU tests run over a sequential grid); the stages of a pass run
// in order on one stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/gla/chunk_kernel.cuh"

namespace mnemo::gla_kernel {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0, "the tensor-core stages (block_mma) run whole warps");

// The sequential state stages run one block per (sequence, head, V tile), fewer than the multiprocessors, so their
// launch bounds ask for one block per multiprocessor: every register a thread may have (`ptxas -v` then shows no
// spill in them at sm_80 and sm_90). The other stages' registers are left to ptxas.
#define MNEMO_GLA_PARALLEL_STAGE __launch_bounds__(kThreads)
#define MNEMO_GLA_SEQUENTIAL_STAGE __launch_bounds__(kThreads, 1)
#define MNEMO_GLA_STAGE_KERNEL(name, block_fn, Pointers, bounds)                                              \
  template <class E, class Acc>                                                                               \
  __global__ void bounds name(Problem p, Pointers ptr) {                                                      \
    extern __shared__ __align__(128) unsigned char shared[];                                                  \
    block_fn<E, Acc>(p, ptr, blockIdx.x, shared,                                                              \
                     grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});               \
  }
MNEMO_GLA_STAGE_KERNEL(state_forward_kernel, state_forward_block, ForwardPointers, MNEMO_GLA_SEQUENTIAL_STAGE)
MNEMO_GLA_STAGE_KERNEL(output_kernel, output_block, ForwardPointers, MNEMO_GLA_PARALLEL_STAGE)
MNEMO_GLA_STAGE_KERNEL(state_backward_kernel, state_backward_block, BackwardPointers, MNEMO_GLA_SEQUENTIAL_STAGE)
MNEMO_GLA_STAGE_KERNEL(gradient_kernel, gradient_block, BackwardPointers, MNEMO_GLA_PARALLEL_STAGE)
#undef MNEMO_GLA_STAGE_KERNEL
#undef MNEMO_GLA_PARALLEL_STAGE
#undef MNEMO_GLA_SEQUENTIAL_STAGE

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("gla chunk kernel: ") + what + ": " + cudaGetErrorString(status));
}

template <class Kernel, class Pointers>
void launch(Kernel kernel, int64_t n, const Problem& p, const Pointers& ptr, std::size_t bytes, void* stream) {
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
    const std::size_t need =
        is_fp64(element)                    ? std::max(shared_bytes<double>(p, false), shared_bytes<double>(p, true))
        : element == Element::kBFloat16 ? std::max(pass_shared_bytes<grid::bf16, float>(p, false),
                                                   pass_shared_bytes<grid::bf16, float>(p, true))
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

template <class E, class Acc>
void forward_stages(const Problem& p, const ForwardPointers& ptr, void* stream) {
  const std::size_t bytes = pass_shared_bytes<E, Acc>(p, false);
  launch(state_forward_kernel<E, Acc>, blocks(p), p, ptr, bytes, stream);
  if (ptr.o) launch(output_kernel<E, Acc>, chunk_blocks(p), p, ptr, bytes, stream);  // o null: the states only
}

template <class E, class Acc>
void backward_stages(const Problem& p, const BackwardPointers& ptr, void* stream) {
  const std::size_t bytes = pass_shared_bytes<E, Acc>(p, true);
  launch(state_backward_kernel<E, Acc>, blocks(p), p, ptr, bytes, stream);
  launch(gradient_kernel<E, Acc>, chunk_blocks(p), p, ptr, bytes, stream);
}

void launch_forward(const Problem& p, const ForwardPointers& ptr, Element element, void* stream) {
  switch (element) {
    case Element::kFloat32: forward_stages<float, float>(p, ptr, stream); break;
    case Element::kBFloat16: forward_stages<grid::bf16, float>(p, ptr, stream); break;
    case Element::kFloat64: forward_stages<double, double>(p, ptr, stream); break;
  }
}

void launch_backward(const Problem& p, const BackwardPointers& ptr, Element element, void* stream) {
  switch (element) {
    case Element::kFloat32: backward_stages<float, float>(p, ptr, stream); break;
    case Element::kBFloat16: backward_stages<grid::bf16, float>(p, ptr, stream); break;
    case Element::kFloat64: backward_stages<double, double>(p, ptr, stream); break;
  }
}

}  // namespace mnemo::gla_kernel
