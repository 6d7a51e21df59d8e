// Compute precision (spec models.md §1.2, §12 rule 1): recurrent states, cumulative gates, triangular
// solves and inner gradients run in fp32 whatever the activation dtype; fp64 inputs (tests) stay fp64.
// The same rule serves attention scores and RMSNorm statistics.
#pragma once
#include <torch/torch.h>

#include <initializer_list>

namespace mnemo {

// fp64 for an fp64 tensor, else fp32.
inline torch::ScalarType recurrence_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// Over several inputs (the delta-rule kernels): fp64 if any defined one is fp64, else fp32.
inline torch::ScalarType recurrence_dtype(std::initializer_list<torch::Tensor> tensors) {
  for (const auto& t : tensors)
    if (t.defined() && t.scalar_type() == torch::kFloat64) return torch::kFloat64;
  return torch::kFloat32;
}

}  // namespace mnemo
