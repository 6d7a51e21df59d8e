// The precision policy of a run (config key `precision`, docs/models.md#numerical-stability):
//   fp32  everything in fp32 (the default; CPU runs and the equivalence tests);
//   bf16  autocast on the run's device: matmuls and attention in bf16, while every recurrence (states, cumulative
//         gates, triangular solves, inner gradients) stays in fp32 — the kernels open an AutocastOff region
//         (runtime/kernels/precision.h) and compute in recurrence_dtype. Parameters and optimiser state stay fp32;
//   fp64  parameters and every computation in float64: the equivalence checks of whole training runs (e.g. a
//         data-parallel job against one rank), not a speed setting.
#pragma once
#include <torch/torch.h>

#include <string>

namespace mnemo {

enum class Precision { fp32, bf16, fp64 };

Precision parse_precision(const std::string& name);  // Error naming the value unless fp32 | bf16 | fp64
std::string precision_name(Precision p);

// Autocast to bf16 on `device`'s type for the lifetime of the object when `p` is bf16; restores the previous
// autocast state and drops autocast's cast cache on exit. On CUDA it also lets the recurrences' kernels take bf16
// operands in their matrix products (bf16_products_enabled, runtime/kernels/precision.h). A no-op for fp32.
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, Precision p);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
  bool was_bf16_products_ = false;
};

// LibTorch's default dtype float64 for the lifetime of the object when `p` is fp64 (modules built inside it have
// float64 parameters and buffers); restores the previous default. A no-op otherwise.
class DefaultDtypeScope {
 public:
  explicit DefaultDtypeScope(Precision p);
  ~DefaultDtypeScope();
  DefaultDtypeScope(const DefaultDtypeScope&) = delete;
  DefaultDtypeScope& operator=(const DefaultDtypeScope&) = delete;

 private:
  bool active_ = false;
  caffe2::TypeMeta was_;
};

}  // namespace mnemo
