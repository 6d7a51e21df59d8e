// CUDA wrappers of the delta-rule chunk kernels: each stage of chunk_kernel.cuh is one kernel whose blocks run the
// stage's block function with their threads as Lanes and the dynamic shared memory (or, for a layout past
// kMaxSharedBytes, their slice of a global workspace) as the tiles. The stages of a pass run in order on one stream.
#include <cuda_runtime.h>

#include "runtime/delta_rule/chunk_kernel.h"

namespace mnemo::delta_rule_kernel {

namespace {

#define MNEMO_DELTA_RULE_STAGE_KERNEL(name, block_fn, Args)                                                      \
  template <class T, class Acc>                                                                                  \
  __global__ void __launch_bounds__(kThreads) name(Args<T, Acc> args, unsigned char* workspace,                  \
                                                   std::size_t block_stride) {                                   \
    extern __shared__ __align__(128) unsigned char shared[];                                                     \
    void* tiles = workspace ? workspace + static_cast<std::size_t>(blockIdx.x) * block_stride : shared;          \
    block_fn<T, Acc>(args, blockIdx.x, tiles,                                                                    \
                     grid::Lanes{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)});                  \
  }
MNEMO_DELTA_RULE_STAGE_KERNEL(prepare_kernel, prepare_block, ForwardArgs)
MNEMO_DELTA_RULE_STAGE_KERNEL(state_forward_kernel, state_forward_block, ForwardArgs)
MNEMO_DELTA_RULE_STAGE_KERNEL(output_kernel, output_block, ForwardArgs)
MNEMO_DELTA_RULE_STAGE_KERNEL(local_backward_kernel, local_backward_block, BackwardArgs)
MNEMO_DELTA_RULE_STAGE_KERNEL(state_backward_kernel, state_backward_block, BackwardArgs)
MNEMO_DELTA_RULE_STAGE_KERNEL(gradient_kernel, gradient_block, BackwardArgs)
#undef MNEMO_DELTA_RULE_STAGE_KERNEL

// Launches `kernel` over `blocks` blocks with `block_bytes` of tiles: dynamic shared memory (opting in above
// 48 KiB) when they fit, else the workspace.
template <class Kernel, class Args>
const char* launch(Kernel kernel, const Args& args, int64_t blocks, std::size_t block_bytes, void* workspace,
                   void* stream) {
  if (blocks == 0) return nullptr;
  const bool in_shared = block_bytes <= kMaxSharedBytes;
  if (!in_shared && workspace == nullptr) return "delta rule kernel: a workspace is required for this tile size";
  const std::size_t dynamic = in_shared ? block_bytes : 0;
  if (dynamic > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, dynamic, static_cast<cudaStream_t>(stream)>>>(
      args, in_shared ? nullptr : static_cast<unsigned char*>(workspace), workspace_stride(block_bytes));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch_forward(const ForwardLaunch& l, void* workspace, void* stream) {
  return with_types(l.dtype, [&](auto types) -> const char* {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    const auto args = typed_args<T, Acc>(l);
    const Problem& p = l.p;
    if (const char* e = launch(prepare_kernel<T, Acc>, args, stage_blocks(Stage::prepare, p),
                               stage_bytes<T, Acc>(Stage::prepare, p), workspace, stream))
      return e;
    if (const char* e = launch(state_forward_kernel<T, Acc>, args, stage_blocks(Stage::state_forward, p),
                               stage_bytes<T, Acc>(Stage::state_forward, p), workspace, stream))
      return e;
    if (l.o == nullptr) return nullptr;  // the backward's recompute: states, L⁻¹ and U' only
    return launch(output_kernel<T, Acc>, args, stage_blocks(Stage::output, p), stage_bytes<T, Acc>(Stage::output, p),
                  workspace, stream);
  });
}

const char* launch_backward(const BackwardLaunch& l, void* workspace, void* stream) {
  return with_types(l.dtype, [&](auto types) -> const char* {
    using T = typename decltype(types)::element;
    using Acc = typename decltype(types)::acc;
    const auto args = typed_args<T, Acc>(l);
    const Problem& p = l.p;
    if (const char* e = launch(local_backward_kernel<T, Acc>, args, stage_blocks(Stage::local_backward, p),
                               stage_bytes<T, Acc>(Stage::local_backward, p), workspace, stream))
      return e;
    if (const char* e = launch(state_backward_kernel<T, Acc>, args, stage_blocks(Stage::state_backward, p),
                               stage_bytes<T, Acc>(Stage::state_backward, p), workspace, stream))
      return e;
    return launch(gradient_kernel<T, Acc>, args, stage_blocks(Stage::gradients, p),
                  stage_bytes<T, Acc>(Stage::gradients, p), workspace, stream);
  });
}

}  // namespace mnemo::delta_rule_kernel
