// CUDA wrappers of the Lattice scan kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks
// ((batch, head) each) run the block function of scan_kernel.cuh with their threads as Lanes; intermediates live in
// the launch's global workspace (ForwardArgs::work, BackwardArgs::work), so no dynamic shared memory is used.
#include "runtime/lattice/scan_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::lattice_kernel {

MNEMO_DEFINE_BLOCK_LAUNCHERS(kThreads)

}  // namespace mnemo::lattice_kernel
