// Fixture op `gla` (naive_recurrent_gla: scale fixed to K^-1/2 unless params.scale says otherwise). Forms:
// recurrent, chunk (eager) and fused_chunk (the fused kernel, chunk_kernel.cuh: the host run on CPU tensors).
#include "runtime/gla/gla.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

static TensorMap run_gla(const TensorMap& in, const json& params, const std::string& form,
                         int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "gla";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto gk = a::required(in, op, "gk");
  auto s0 = a::optional(in, "initial_state");
  const double scale = a::scale(params, op, q.size(-1));
  auto r = form == "fused_chunk" ? gla_chunk_fused(q, k, v, gk, GlaGate::kKeyWise, scale, s0, chunk_size)
           : a::is_chunk_form(op, form) ? gla_chunk(q, k, v, gk, scale, s0, chunk_size)
                                        : gla_recurrent(q, k, v, gk, scale, s0);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

void register_gla_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"gla", {"recurrent", "chunk", "fused_chunk"}, run_gla, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})}, {"gk", kb::log_decay({B, T, H, D})}}};
                 }});
}

}  // namespace mnemo
