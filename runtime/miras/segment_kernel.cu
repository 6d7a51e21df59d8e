// CUDA wrappers of the Miras segment kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks
// ((batch, head) each) run the block function of segment_kernel.cuh with their threads as Lanes; intermediates live in
// the launch's global workspace (ForwardArgs::work, BackwardArgs::work), so no dynamic shared memory is used.
#include "runtime/miras/segment_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::miras_kernel {

MNEMO_DEFINE_BLOCK_LAUNCHERS(kThreads)

}  // namespace mnemo::miras_kernel
