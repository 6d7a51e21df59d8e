// CUDA wrappers of Mamba's selective-scan kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks
// (a batch row and a tile of channels each) run the block function of scan_kernel.cuh with their threads as Lanes;
// the states and per-step terms live in the launch's global workspace, so no dynamic shared memory is used.
#include "runtime/mamba/scan_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::mamba_kernel {

MNEMO_DEFINE_BLOCK_LAUNCHERS(kThreads)

}  // namespace mnemo::mamba_kernel
