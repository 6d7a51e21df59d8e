// Device strings of every command: "cpu", "cuda", "cuda:N" or "auto" (CUDA device 0 when present).
#pragma once
#include <torch/torch.h>

#include <string>

namespace mnemo {

torch::Device resolve_device(const std::string& name);  // Error for anything else, or CUDA absent

}  // namespace mnemo
