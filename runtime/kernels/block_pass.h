// One pass of a block-code kernel (block_grid.cuh) on a tensor's device: its CUDA launcher on a CUDA tensor in builds
// that link the kernels, else its block function over the sequential host grid (host_grid.h), which is how the CPU
// tests run a kernel's own decomposition. Shared by the kernel forms of the deep-memory chunk node, the Miras
// segment node and the Lattice scan.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <string>
#include <utility>

#include "core/common.h"
#include "core/torch_compat.h"
#include "runtime/kernels/fused_layers.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/kernels/kernel_counts.h"

// A kernel family's launcher (`const char* launch(const Args&, void* stream)`, its .cu file) where the build links the
// CUDA kernels, else nullptr: its symbols exist only in such builds.
#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
#define MNEMO_DEVICE_LAUNCHER(launch) (launch)
#else
#define MNEMO_DEVICE_LAUNCHER(launch) nullptr
#endif

namespace mnemo::grid {

// Whether CUDA tensors take the block-code kernels: builds that link them, unless MNEMO_FUSED_CUDA=0.
inline bool device_kernels_enabled() {
#if defined(MNEMO_CUDA_KERNELS) && defined(MNEMO_WITH_CUDA)
  return fused_cuda_layers_enabled();
#else
  return false;
#endif
}

// A tensor's data as Acc*, null for an undefined or empty tensor (the absent inputs of a kernel's arguments).
template <class Acc>
Acc* data_of(const torch::Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_ptr<Acc>() : nullptr;
}

// A pass's global workspace: per_block Acc elements for each of `blocks` blocks (at least one element).
inline torch::Tensor workspace(int64_t per_block, int64_t blocks, const torch::Tensor& like) {
  return torch::empty({std::max<int64_t>(1, blocks * per_block)}, like.options());
}

// run(Acc{}) with the kernels' accumulation type for `like`: double for fp64, else float.
template <class Run>
void with_acc_type(const torch::Tensor& like, Run&& run) {
  if (like.scalar_type() == torch::kFloat64) run(0.0);
  else run(0.f);
}

// A kernel family's launcher type for the arguments Args (not deduced from the launcher, which may be nullptr).
template <class Args>
struct Launcher {
  using type = const char* (*)(const Args&, void*);
};

// A kernel form's state: whether CPU tensors run its block code over the host grid (the tests' scope), and how many
// passes it has run in this process. `counted` names the kernel in the pass counts (kernel_counts.h, e.g.
// "lattice_scan"), `described` in errors (e.g. "lattice scan kernel").
class KernelForm {
 public:
  KernelForm(std::string counted, std::string described)
      : counted_(std::move(counted)), described_(std::move(described)) {}
  bool on_host() const { return on_host_.load(std::memory_order_relaxed) != 0; }
  void set_on_host(bool on) { on_host_.store(on ? 1 : 0); }
  int64_t passes() const { return passes_.load(std::memory_order_relaxed); }

  // One pass ("forward", "backward") over `blocks` blocks: `launch` on a CUDA tensor, else block_fn(args, block,
  // shared, lanes) over the host grid; counted with its products (bf16 on tensor cores or not, products_label).
  template <class Args, class BlockFn>
  void run(const torch::Tensor& like, const Args& args, int64_t blocks, BlockFn block_fn,
           typename Launcher<Args>::type launch, const char* pass, bool bf16_products = false) {
    count_kernel_pass(counted_ + " " + pass, like, products_label(like.scalar_type(), bf16_products));
    const std::string what = described_ + ", " + pass;
    passes_.fetch_add(1, std::memory_order_relaxed);
    if (like.is_cuda()) {
      if (!launch) throw Error(what + ": this build has no CUDA kernels (nvcc was not found at configure time)");
#ifdef MNEMO_WITH_CUDA
      if (const char* err = launch(args, torch_compat::current_cuda_stream(like.device())))
        throw Error(what + ": " + err);
#endif
      return;
    }
    run_on_host(blocks, 0, [&](int64_t block, void* shared, Lanes lanes) { block_fn(args, block, shared, lanes); });
  }

 private:
  std::string counted_, described_;
  std::atomic<int> on_host_{0};
  std::atomic<int64_t> passes_{0};
};

}  // namespace mnemo::grid
