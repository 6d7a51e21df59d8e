// Registry of kernel ops in the fixture format of shared/fixtures/kernels (README there):
// an op takes named fp64/fp32 input tensors (in the fixture's layout) and scalar params and
// returns named outputs ("o", "final_state", ...), in one of its forms ("recurrent", "chunk").
// `mnemo check-kernel` and the oracle tests run every form of an op against a fixture.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

using TensorMap = std::map<std::string, torch::Tensor>;

// Inputs for `mnemo bench --kernel OP`: random fp32 tensors in the op's fixture layout and value ranges
// (normalised keys, log decays <= 0, gates in (0, 1), ...) plus the params the op reads.
struct KernelBenchInputs {
  TensorMap inputs;
  json params = json::object();
};

struct KernelOp {
  std::string name;                // fixture "op" field, e.g. "gated_delta_rule"
  std::vector<std::string> forms;  // e.g. {"recurrent", "chunk"}
  // inputs: the fixture's `inputs` (absent optional inputs are absent); params: its `params`;
  // form: one of `forms`; chunk_size: for chunked forms.
  std::function<TensorMap(const TensorMap& inputs, const json& params, const std::string& form,
                          int64_t chunk_size)>
      run;
  // batch B, length T, heads H, head dim D -> random inputs (bench); empty when the op has none.
  std::function<KernelBenchInputs(int64_t B, int64_t T, int64_t H, int64_t D)> random_inputs;
  // The chunk size `run` uses for a requested one, for an op whose kernel takes only some sizes (check-kernel
  // prints what ran); empty: the requested size.
  std::function<int64_t(int64_t requested)> chunk_used;
};

// Building blocks of the ops' random_inputs (fp32, from torch's global generator).
namespace kernel_bench {
inline torch::Tensor normal(at::IntArrayRef shape) { return torch::randn(shape); }
inline torch::Tensor l2_normalized(at::IntArrayRef shape) {
  auto x = torch::randn(shape);
  return x / x.norm(2, -1, true).clamp_min(1e-6);
}
inline torch::Tensor log_decay(at::IntArrayRef shape) { return torch::log_sigmoid(torch::randn(shape) + 3.0); }
inline torch::Tensor unit_gate(at::IntArrayRef shape) { return torch::sigmoid(torch::randn(shape)); }
}  // namespace kernel_bench

class KernelOpRegistry {
 public:
  static KernelOpRegistry& instance();  // built-ins registered on first use
  void add(KernelOp op);
  const KernelOp& at(const std::string& name) const;  // throws Error listing known ops
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<KernelOp> ops_;
};

// Defined in runtime/ops/kernel_ops.cpp: calls every family's op registration.
void register_builtin_kernel_ops(KernelOpRegistry& r);

}  // namespace mnemo
