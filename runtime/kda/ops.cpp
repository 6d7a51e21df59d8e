// Fixture op `kda` (flash-linear-attention's naive_recurrent_kda: q, k [B,T,H,K], v [B,T,H,V], g [B,T,H,K] log
// decay, beta [B,T,H], optional initial_state [B,H,K,V]; scale K^-1/2 unless params.scale says otherwise). Forms:
// recurrent, chunk, fused_chunk (the chunk form with its chunk pass on the state-pass kernel, as a GPU runs it:
// runtime/kernels/state_pass_kernel.cuh; its block code over the host grid on CPU tensors).
#include "runtime/kda/kda.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

static TensorMap run_kda(const TensorMap& in, const json& params, const std::string& form, int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "kda";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto beta = a::required(in, op, "beta"), g = a::required(in, op, "g");
  auto s0 = a::optional(in, "initial_state");
  const double scale = a::scale(params, op, q.size(-1));
  const a::StatePassForms forms(op, form);
  auto r = forms.chunked() ? kda_chunk(q, k, v, beta, g, s0, scale, chunk_size)
                           : kda_recurrent(q, k, v, beta, g, s0, scale);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

void register_kda_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"kda", {"recurrent", "chunk", "fused_chunk"}, run_kda, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})},
                                             {"k", kb::l2_normalized({B, T, H, D})}, {"v", kb::normal({B, T, H, D})},
                                             {"beta", kb::unit_gate({B, T, H})}, {"g", kb::log_decay({B, T, H, D})}}};
                 }});
}

}  // namespace mnemo
