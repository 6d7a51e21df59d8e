// A step — forward, backward and optimiser, or a forward alone — captured once as a CUDA graph and replayed.
// Small models (the synthetic sweeps' d 64–256, 2–4 layers) are launch-bound on any GPU: a replay issues the step's
// thousands of kernels as one launch. Capture needs static shapes and a step that never waits for the host (no
// .item(), no host copies); the step's tensors come from the graph's private memory pool and stay valid between
// replays, so a replay reads its inputs from, and writes its results into, the same tensors each time.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>

namespace mnemo {

// Whether this build can capture CUDA graphs (a LibTorch with CUDA).
bool cuda_graphs_available();

class CapturedStep {
 public:
  // Runs `step` `warmup` times eagerly on a side stream (lazy initialisations, cuBLAS workspaces, the allocator's
  // blocks, the optimiser's state), then captures one call of it. Throws Error naming the cause where the build
  // has no CUDA, `device` is not a CUDA device, or the step cannot be captured (it synchronises with the host).
  // Capturing records the step's kernels without running them: after the constructor the step has run `warmup`
  // times, and each replay() runs it once. Host-side state the step changes (MultiTensorAdamW's step mirror)
  // changes once, at the capture; what the kernels read (its step counts on the device) advances with each replay.
  CapturedStep(const std::function<void()>& step, const torch::Device& device, int warmup = 3);
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // One replay of the captured step on the current stream (asynchronous, as the eager step is).
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo
