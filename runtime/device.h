// Device strings of every command: "cpu", "cuda", "cuda:N" or "auto" (CUDA device 0 when present).
#pragma once
#include <torch/torch.h>

#include <string>

namespace mnemo {

torch::Device resolve_device(const std::string& name);  // Error for anything else, or CUDA absent

// A host batch onto `device`: to CUDA through pinned (page-locked) memory and a non-blocking copy, so the copy
// overlaps the work queued before it; elsewhere a plain .to(device).
torch::Tensor to_device(const torch::Tensor& host, const torch::Device& device);

// Waits for the work queued on `device` (CUDA: that device, or the current one for "cuda"); nothing on the CPU.
void synchronize(const torch::Device& device);

}  // namespace mnemo
