// Compute precision (docs/models.md#conventions, docs/models.md#numerical-stability rule 1): recurrent states, cumulative gates, triangular
// solves and inner gradients run in fp32 whatever the activation dtype; fp64 inputs (tests) stay fp64.
// The same rule serves attention scores and RMSNorm statistics.
#pragma once
#include <c10/core/impl/LocalDispatchKeySet.h>
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

// Autocast off for the lifetime of the object (the scope of a recurrence): under the bf16 policy
// (runtime/mixed_precision.h) matmuls elsewhere run in bf16, but those of a recurrence must run in the dtype the
// kernel chose with recurrence_dtype (docs/models.md#numerical-stability rule 1). Nested regions are fine.
class AutocastOff {
 public:
  AutocastOff() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// Whether a recurrence's CUDA kernel may give its matrix products bf16 operands with fp32 sums (tensor cores), as
// flash-linear-attention's kernels do, while its states, gates and inner gradients stay fp32 (rule 1 above). On
// while a bf16 AutocastScope on CUDA is active (training and evaluation at precision bf16); tests set it with
// Bf16ProductsScope. Thread-local, like autocast: a kernel's forward records the choice for its backward, which
// autograd may run on another thread.
inline bool& bf16_products_flag() {
  static thread_local bool on = false;
  return on;
}
inline bool bf16_products_enabled() { return bf16_products_flag(); }

class Bf16ProductsScope {
 public:
  explicit Bf16ProductsScope(bool on) : was_(bf16_products_flag()) { bf16_products_flag() = on; }
  ~Bf16ProductsScope() { bf16_products_flag() = was_; }
  Bf16ProductsScope(const Bf16ProductsScope&) = delete;
  Bf16ProductsScope& operator=(const Bf16ProductsScope&) = delete;

 private:
  bool was_;
};

}  // namespace mnemo
