// CUDA wrappers of the chunk state-pass kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks (a
// recurrence and a tile of state columns each) run the block function of state_pass_kernel.cuh with their threads as
// Lanes; the states are written into the outputs, so no dynamic shared memory and no workspace are used.
#include "runtime/kernels/state_pass_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::state_pass_kernel {

MNEMO_DEFINE_BLOCK_LAUNCHERS(kThreads)

}  // namespace mnemo::state_pass_kernel
