// Kernel ops `delta_rule` and `gated_delta_rule` in the fixture format
// (shared/fixtures/kernels/README.md): forms "recurrent" and "chunk".
//   delta_rule:       q, k [B,H,T,K], v [B,H,T,V], beta [B,H,T] (head-first layout), scale K^-0.5
//   gated_delta_rule: q, k [B,T,H,K], v [B,T,H,V], beta, g [B,T,H], scale from params
// Both: optional initial_state [B,H,K,V]; outputs o (input layout) and final_state [B,H,K,V].
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

namespace {

namespace a = kernel_op_args;

DeltaRuleResult run_form(const std::string& op, const std::string& form, int64_t chunk_size,
                         const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& h0,
                         double scale) {
  if (a::is_chunk_form(op, form)) {
    // CUDA tensors run the fused chunk kernels (chunk_kernel.cuh); the eager chunk form is the CPU reference.
    if (delta_rule_fused_on_device(q)) return delta_rule_chunk_fused(q, k, v, beta, g, h0, scale, chunk_size);
    return delta_rule_chunk(q, k, v, beta, g, h0, scale, chunk_size);
  }
  return delta_rule_recurrent(q, k, v, beta, g, h0, scale);
}

TensorMap run_delta_rule(const TensorMap& in, const json& params, const std::string& form, int64_t chunk) {
  const std::string op = "delta_rule";
  // Head-first fixture layout -> the kernels' [B, T, H, D].
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto beta = a::required(in, op, "beta");
  if (q.dim() != 4 || beta.dim() != 3)
    throw Error("kernel op delta_rule: q must be [B,H,T,K] and beta [B,H,T], got " + c10::str(q.sizes()) +
                " and " + c10::str(beta.sizes()));
  auto r = run_form(op, form, chunk, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                    beta.transpose(1, 2), torch::Tensor(), a::optional(in, "initial_state"),
                    a::scale(params, op, q.size(3)));
  return {{"o", r.o.transpose(1, 2).contiguous()}, {"final_state", r.final_state}};
}

TensorMap run_gated_delta_rule(const TensorMap& in, const json& params, const std::string& form,
                               int64_t chunk) {
  const std::string op = "gated_delta_rule";
  auto q = a::required(in, op, "q");
  if (q.dim() != 4) throw Error("kernel op gated_delta_rule: q must be [B,T,H,K], got " + c10::str(q.sizes()));
  auto r = run_form(op, form, chunk, q, a::required(in, op, "k"), a::required(in, op, "v"),
                    a::required(in, op, "beta"), a::required(in, op, "g"),
                    a::optional(in, "initial_state"), a::scale(params, op, q.size(3)));
  return {{"o", r.o}, {"final_state", r.final_state}};
}

}  // namespace

void register_delta_rule_ops(KernelOpRegistry& r) {
  namespace kb = kernel_bench;
  r.add({"delta_rule", {"recurrent", "chunk"}, run_delta_rule, [](int64_t B, int64_t T, int64_t H, int64_t D) {
           return KernelBenchInputs{{{"q", kb::l2_normalized({B, H, T, D})}, {"k", kb::l2_normalized({B, H, T, D})},
                                     {"v", kb::normal({B, H, T, D})}, {"beta", kb::unit_gate({B, H, T})}}};
         }});
  r.add({"gated_delta_rule", {"recurrent", "chunk"}, run_gated_delta_rule,
         [](int64_t B, int64_t T, int64_t H, int64_t D) {
           return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})}, {"k", kb::l2_normalized({B, T, H, D})},
                                     {"v", kb::normal({B, T, H, D})}, {"beta", kb::unit_gate({B, T, H})},
                                     {"g", kb::log_decay({B, T, H})}}};
         }});
}

}  // namespace mnemo
