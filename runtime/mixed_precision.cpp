#include "runtime/mixed_precision.h"

#include "core/common.h"
#include "core/torch_compat.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp64") return Precision::fp64;
  throw Error("precision '" + name + "' is not one of fp32, bf16, fp64");
}

std::string precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp64 ? "fp64" : "fp32";
}

DefaultDtypeScope::DefaultDtypeScope(Precision p) : was_(torch::get_default_dtype()) {
  if (p != Precision::fp64) return;
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  active_ = true;
}

DefaultDtypeScope::~DefaultDtypeScope() {
  if (active_) torch::set_default_dtype(was_);
}

AutocastScope::AutocastScope(const torch::Device& device, Precision p) {
  if (p != Precision::bf16) return;
  type_ = device.type();
  if (type_ != c10::DeviceType::CPU && type_ != c10::DeviceType::CUDA)
    throw Error("precision bf16: autocast needs a cpu or cuda device, got " + device.str());
  was_enabled_ = torch_compat::autocast_enabled(type_);
  was_dtype_ = torch_compat::autocast_dtype(type_);
  torch_compat::set_autocast(type_, true, at::kBFloat16);
  at::autocast::increment_nesting();
  was_bf16_products_ = bf16_products_flag();
  if (type_ == c10::DeviceType::CUDA) bf16_products_flag() = true;
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The cast cache (bf16 copies of the fp32 weights) lives until the outermost autocast region ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  torch_compat::set_autocast(type_, was_enabled_, was_dtype_);
  bf16_products_flag() = was_bf16_products_;
}

}  // namespace mnemo
