// CUDA wrappers of the deep-memory chunk kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks
// ((batch, head) each) run the block function of chunk_kernel.cuh with their threads as Lanes; intermediates live in
// the launch's global workspace (ForwardArgs::work, BackwardArgs::work), so no dynamic shared memory is used.
#include "runtime/deep_memory/chunk_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::deep_memory_kernel {

MNEMO_DEFINE_BLOCK_LAUNCHERS(kThreads)

}  // namespace mnemo::deep_memory_kernel
