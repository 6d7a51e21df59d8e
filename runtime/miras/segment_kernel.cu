// CUDA wrappers of the Miras segment kernel: one kernel a pass (runtime/kernels/block_launch.cuh), whose blocks
// ((batch, head) each) run the block function of segment_kernel.cuh with their threads as Lanes; intermediates live in
// the launch's global workspace (ForwardArgs::work, BackwardArgs::work), so no dynamic shared memory is used.
#include "runtime/miras/segment_kernel.h"
#include "runtime/kernels/block_launch.cuh"

namespace mnemo::miras_kernel {

namespace {

struct Forward {
  template <class Acc>
  static __device__ void run(const ForwardArgs<Acc>& a, int64_t block, void* shared, grid::Lanes lanes) {
    forward_block<Acc>(a, block, shared, lanes);
  }
};
struct Backward {
  template <class Acc>
  static __device__ void run(const BackwardArgs<Acc>& a, int64_t block, void* shared, grid::Lanes lanes) {
    backward_block<Acc>(a, block, shared, lanes);
  }
};

}  // namespace

const char* launch(const ForwardArgs<float>& a, void* stream) {
  return grid::launch_blocks<kThreads, Forward>(a, a.z.blocks, stream);
}
const char* launch(const ForwardArgs<double>& a, void* stream) {
  return grid::launch_blocks<kThreads, Forward>(a, a.z.blocks, stream);
}
const char* launch(const BackwardArgs<float>& a, void* stream) {
  return grid::launch_blocks<kThreads, Backward>(a, a.x.z.blocks, stream);
}
const char* launch(const BackwardArgs<double>& a, void* stream) {
  return grid::launch_blocks<kThreads, Backward>(a, a.x.z.blocks, stream);
}

}  // namespace mnemo::miras_kernel
