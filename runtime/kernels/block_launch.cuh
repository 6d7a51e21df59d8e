// The CUDA side of block code (block_grid.cuh): a __global__ wrapper that runs a block function with the block's
// threads as Lanes, and its launch on a stream. nvcc only; the host side is host_grid.h, and the torch side that picks
// one or the other per tensor is block_pass.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernels/block_grid.cuh"

namespace mnemo::grid {

// Block::run(args, block, shared, lanes) is the block function (a static member template, so that one wrapper serves
// every accumulation type).
template <int Threads, class Block, class Args>
__global__ void __launch_bounds__(Threads) block_kernel(Args args) {
  Block::run(args, blockIdx.x, nullptr, Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});
}

// `blocks` blocks of Threads threads, no dynamic shared memory (intermediates live in the arguments' workspace).
// Returns null on success, else the CUDA error's text.
template <int Threads, class Block, class Args>
const char* launch_blocks(const Args& args, int64_t blocks, void* stream) {
  if (blocks == 0) return nullptr;
  block_kernel<Threads, Block, Args>
      <<<static_cast<unsigned>(blocks), Threads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace mnemo::grid

// The four launchers of a kernel family with one forward and one backward pass (a .cu file's whole body, inside the
// family's namespace): `const char* launch(const ForwardArgs<Acc>&, void*)` and `launch(const BackwardArgs<Acc>&,
// void*)` for Acc = float, double, running the namespace's forward_block / backward_block with THREADS threads a block
// over args.z.blocks (forward) or args.x.z.blocks (backward) blocks.
#define MNEMO_DEFINE_BLOCK_LAUNCHERS(THREADS)                                                                       \
  namespace {                                                                                                     \
  struct ForwardBlock {                                                                                           \
    template <class Acc>                                                                                          \
    static __device__ void run(const ForwardArgs<Acc>& a, int64_t block, void* shared, ::mnemo::grid::Lanes lanes) { \
      forward_block<Acc>(a, block, shared, lanes);                                                                \
    }                                                                                                             \
  };                                                                                                              \
  struct BackwardBlock {                                                                                          \
    template <class Acc>                                                                                          \
    static __device__ void run(const BackwardArgs<Acc>& a, int64_t block, void* shared,                           \
                               ::mnemo::grid::Lanes lanes) {                                                      \
      backward_block<Acc>(a, block, shared, lanes);                                                               \
    }                                                                                                             \
  };                                                                                                              \
  }                                                                                                               \
  const char* launch(const ForwardArgs<float>& a, void* stream) {                                                 \
    return ::mnemo::grid::launch_blocks<THREADS, ForwardBlock>(a, a.z.blocks, stream);                            \
  }                                                                                                               \
  const char* launch(const ForwardArgs<double>& a, void* stream) {                                                \
    return ::mnemo::grid::launch_blocks<THREADS, ForwardBlock>(a, a.z.blocks, stream);                            \
  }                                                                                                               \
  const char* launch(const BackwardArgs<float>& a, void* stream) {                                                \
    return ::mnemo::grid::launch_blocks<THREADS, BackwardBlock>(a, a.x.z.blocks, stream);                         \
  }                                                                                                               \
  const char* launch(const BackwardArgs<double>& a, void* stream) {                                               \
    return ::mnemo::grid::launch_blocks<THREADS, BackwardBlock>(a, a.x.z.blocks, stream);                         \
  }
