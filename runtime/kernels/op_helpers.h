// Small helpers for the fixture-format kernel ops of the linear-recurrent families
// (runtime/ops/kernel_ops.h): required/optional inputs, the query scale, the form switch.
#pragma once
#include <cmath>
#include <string>

#include "runtime/kernels/chunking.h"
#include "runtime/ops/kernel_ops.h"

namespace mnemo::kernel_op_args {

inline torch::Tensor required(const TensorMap& in, const std::string& op, const std::string& name) {
  auto it = in.find(name);
  if (it == in.end() || !it->second.defined())
    throw Error("kernel op '" + op + "': input '" + name + "' is missing");
  return it->second;
}

inline torch::Tensor optional(const TensorMap& in, const std::string& name) {
  auto it = in.find(name);
  return it == in.end() ? torch::Tensor() : it->second;
}

// params.scale when given (a number), else key_dim^-1/2 (the fla default).
inline double scale(const json& params, const std::string& op, int64_t key_dim) {
  if (params.is_object() && params.contains("scale") && !params["scale"].is_null()) {
    if (!params["scale"].is_number())
      throw Error("kernel op '" + op + "': params.scale must be a number, got " + params["scale"].dump());
    return params["scale"].get<double>();
  }
  return 1.0 / std::sqrt(static_cast<double>(key_dim));
}

// true for "chunk", false for "recurrent"; anything else is an error naming the op.
inline bool is_chunk_form(const std::string& op, const std::string& form) {
  if (form == "chunk") return true;
  if (form == "recurrent") return false;
  throw Error("kernel op '" + op + "': unknown form '" + form + "' (known: recurrent, chunk)");
}

// The form switch of an op whose chunk form carries its chunk pass on the state-pass kernel (chunking.h):
// "fused_chunk" is the chunk form with the kernel taken on CPU tensors too (its block code over the host grid, as a
// GPU runs it) while this object lives; chunked() is true for "chunk" and "fused_chunk", false for "recurrent".
class StatePassForms {
 public:
  StatePassForms(const std::string& op, const std::string& form)
      : fused_(form == "fused_chunk"), on_host_(fused_), chunked_(fused_ || is_chunk_form(op, form)) {}
  bool chunked() const { return chunked_; }

 private:
  bool fused_;
  StatePassKernelHostScope on_host_;
  bool chunked_;
};

}  // namespace mnemo::kernel_op_args
