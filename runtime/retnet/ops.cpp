// Fixture ops `simple_gla` ([B,T,H,D]; forms recurrent, chunk and fused_chunk, the family's fused kernel) and
// `retention` (head-first [B,H,T,D], no state).
#include "runtime/gla/gla.h"
#include "runtime/kernels/op_helpers.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

static TensorMap run_simple_gla(const TensorMap& in, const json& params, const std::string& form,
                                int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "simple_gla";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto g = a::required(in, op, "g");
  auto s0 = a::optional(in, "initial_state");
  const double scale = a::scale(params, op, q.size(-1));
  auto r = form == "fused_chunk" ? gla_chunk_fused(q, k, v, g, GlaGate::kScalar, scale, s0, chunk_size)
           : a::is_chunk_form(op, form) ? simple_gla_chunk(q, k, v, g, scale, s0, chunk_size)
                                        : simple_gla_recurrent(q, k, v, g, scale, s0);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

static TensorMap run_retention(const TensorMap& in, const json& params, const std::string& form,
                               int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "retention";
  // Head-first fixture layout [B, H, T, D] -> kernel layout [B, T, H, D] and back.
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  check_shape(op, "q", q, {-1, -1, -1, -1});
  check_shape(op, "k", k, {q.size(0), q.size(1), q.size(2), q.size(3)});
  check_shape(op, "v", v, {q.size(0), q.size(1), q.size(2), -1});
  q = q.transpose(1, 2), k = k.transpose(1, 2), v = v.transpose(1, 2);
  const double scale = a::scale(params, op, q.size(-1));
  auto r = a::is_chunk_form(op, form) ? retention_chunk(q, k, v, scale, {}, chunk_size)
                                      : retention_recurrent(q, k, v, scale, {});
  return {{"o", r.o.transpose(1, 2)}};
}

void register_retnet_ops(KernelOpRegistry& r) {
  namespace kb = kernel_bench;
  r.add(KernelOp{"simple_gla", {"recurrent", "chunk", "fused_chunk"}, run_simple_gla, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})}, {"g", kb::log_decay({B, T, H})}}};
                 }});
  r.add(KernelOp{"retention", {"recurrent", "chunk"}, run_retention, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   return KernelBenchInputs{{{"q", kb::normal({B, H, T, D})}, {"k", kb::normal({B, H, T, D})},
                                             {"v", kb::normal({B, H, T, D})}}};
                 }});
}

}  // namespace mnemo
