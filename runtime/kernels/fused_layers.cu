// CUDA kernels and launchers of the layer kernels: each kernel is one call of a block function in fused_layers.cuh
// (the code the CPU tests run over a sequential grid).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "runtime/kernels/fused_layers.cuh"

namespace mnemo::layers_kernel {
namespace {

constexpr int kThreads = 256;  // a power of two (block_sum)

#define MNEMO_LAYERS_KERNEL(name, block_fn, Problem, Pointers)                                                \
  template <class E, class Acc>                                                                               \
  __global__ void __launch_bounds__(kThreads) name(Problem p, Pointers ptr) {                                 \
    extern __shared__ __align__(16) unsigned char shared[];                                                   \
    block_fn<E, Acc>(p, ptr, blockIdx.x, shared,                                                              \
                     grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});              \
  }
MNEMO_LAYERS_KERNEL(rms_norm_forward_kernel, rms_norm_forward_block, RowProblem, RmsNormForward)
MNEMO_LAYERS_KERNEL(rms_norm_backward_kernel, rms_norm_backward_block, RowProblem, RmsNormBackward)
MNEMO_LAYERS_KERNEL(swiglu_gate_forward_kernel, swiglu_gate_forward_block, GateProblem, GatePointers)
MNEMO_LAYERS_KERNEL(swiglu_gate_backward_kernel, swiglu_gate_backward_block, GateProblem, GatePointers)
MNEMO_LAYERS_KERNEL(rope_kernel, rope_block, RopeProblem, RopePointers)
#undef MNEMO_LAYERS_KERNEL

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("layer kernel: ") + what + ": " + cudaGetErrorString(status));
}

template <class Kernel, class Problem, class Pointers>
void launch(Kernel kernel, int64_t blocks, const Problem& p, const Pointers& ptr, std::size_t bytes, void* stream) {
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, static_cast<cudaStream_t>(stream)>>>(p, ptr);
  check(cudaGetLastError(), "launch");
}

// Calls run(E{}, Acc{}) with the element and accumulation types of `element`.
template <class Run>
void typed(Element element, Run&& run) {
  switch (element) {
    case Element::kFloat32: run(float{}, float{}); break;
    case Element::kFloat64: run(double{}, double{}); break;
    case Element::kBFloat16: run(grid::bf16{}, float{}); break;
  }
}

}  // namespace

void launch_rms_norm_forward(const RowProblem& p, const RmsNormForward& ptr, Element element, void* stream) {
  typed(element, [&](auto e, auto acc) {
    using E = decltype(e);
    using Acc = decltype(acc);
    launch(rms_norm_forward_kernel<E, Acc>, row_blocks(p), p, ptr, rms_norm_shared_bytes<Acc>(kThreads), stream);
  });
}

void launch_rms_norm_backward(const RowProblem& p, const RmsNormBackward& ptr, Element element, void* stream) {
  typed(element, [&](auto e, auto acc) {
    using E = decltype(e);
    using Acc = decltype(acc);
    launch(rms_norm_backward_kernel<E, Acc>, row_blocks(p), p, ptr, rms_norm_shared_bytes<Acc>(kThreads), stream);
  });
}

void launch_swiglu_gate_forward(const GateProblem& p, const GatePointers& ptr, Element element, void* stream) {
  typed(element, [&](auto e, auto acc) {
    launch(swiglu_gate_forward_kernel<decltype(e), decltype(acc)>, gate_blocks(p), p, ptr, 0, stream);
  });
}

void launch_swiglu_gate_backward(const GateProblem& p, const GatePointers& ptr, Element element, void* stream) {
  typed(element, [&](auto e, auto acc) {
    launch(swiglu_gate_backward_kernel<decltype(e), decltype(acc)>, gate_blocks(p), p, ptr, 0, stream);
  });
}

void launch_rope(const RopeProblem& p, const RopePointers& ptr, Element element, void* stream) {
  typed(element, [&](auto e, auto acc) {
    launch(rope_kernel<decltype(e), decltype(acc)>, rope_blocks(p), p, ptr, 0, stream);
  });
}

}  // namespace mnemo::layers_kernel
