// Fixture ops `linear_attn` and `linear_attn_norm` (shared/fixtures/kernels/README.md).
#include "runtime/linear_attn/linear_attn.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

static TensorMap run_linear_attn(const std::string& op, bool normalize, const TensorMap& in,
                                 const json& params, const std::string& form, int64_t chunk_size) {
  namespace a = kernel_op_args;
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto s0 = a::optional(in, "initial_state");
  torch::Tensor z0;
  if (normalize) {
    z0 = a::optional(in, "initial_state_z");  // [B, 1, H, K] in the fixture
    if (z0.defined()) {
      check_shape(op, "initial_state_z", z0, {q.size(0), 1, q.size(2), q.size(3)});
      z0 = z0.squeeze(1);
    }
  }
  const double scale = a::scale(params, op, q.size(-1));
  auto r = a::is_chunk_form(op, form)
               ? linear_attn_chunk(q, k, v, scale, s0, chunk_size, normalize, z0)
               : linear_attn_recurrent(q, k, v, scale, s0, normalize, z0);
  TensorMap out{{"o", r.o}, {"final_state", r.final_state}};
  if (normalize) out["final_state_z"] = r.final_z.unsqueeze(1);
  return out;
}

void register_linear_attn_ops(KernelOpRegistry& r) {
  for (bool normalize : {false, true}) {
    const std::string name = normalize ? "linear_attn_norm" : "linear_attn";
    KernelOp op{name, {"recurrent", "chunk"},
                [name, normalize](const TensorMap& in, const json& params, const std::string& form,
                                  int64_t chunk_size) {
                  return run_linear_attn(name, normalize, in, params, form, chunk_size);
                }};
    op.random_inputs = [normalize](int64_t B, int64_t T, int64_t H, int64_t D) {
      namespace kb = kernel_bench;
      auto q = kb::normal({B, T, H, D}), k = kb::normal({B, T, H, D});
      if (normalize) q = torch::elu(q) + 1, k = torch::elu(k) + 1;  // the fixture's feature map
      return KernelBenchInputs{{{"q", q}, {"k", k}, {"v", kb::normal({B, T, H, D})}}};
    };
    r.add(std::move(op));
  }
}

}  // namespace mnemo
