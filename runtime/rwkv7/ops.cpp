// Fixture op `rwkv7` (flash-linear-attention's dplr_recurrence, the diagonal-plus-low-rank recurrence RWKV-7 runs on:
// r, w, k, a, b [B,T,H,K] with w the log decay, v [B,T,H,V], optional initial_state [B,H,K,V]; scale K^-1/2 unless
// params.scale says otherwise). Forms: recurrent, chunk, fused_chunk (the chunk form with its chunk pass on the
// state-pass kernel, as a GPU runs it: runtime/kernels/state_pass_kernel.cuh; its block code over the host grid on CPU
// tensors).
#include "runtime/kernels/op_helpers.h"
#include "runtime/rwkv7/rwkv7.h"

namespace mnemo {

static TensorMap run_rwkv7(const TensorMap& in, const json& params, const std::string& form, int64_t chunk_size) {
  namespace arg = kernel_op_args;
  const std::string op = "rwkv7";
  auto r = arg::required(in, op, "r"), w = arg::required(in, op, "w"), k = arg::required(in, op, "k");
  auto v = arg::required(in, op, "v"), a = arg::required(in, op, "a"), b = arg::required(in, op, "b");
  auto s0 = arg::optional(in, "initial_state");
  const double scale = arg::scale(params, op, r.size(-1));
  const arg::StatePassForms forms(op, form);
  auto res = forms.chunked() ? rwkv7_chunk(r, w, k, v, a, b, s0, scale, chunk_size)
                             : rwkv7_recurrent(r, w, k, v, a, b, s0, scale);
  return {{"o", res.o}, {"final_state", res.final_state}};
}

void register_rwkv7_ops(KernelOpRegistry& reg) {
  reg.add(KernelOp{"rwkv7", {"recurrent", "chunk", "fused_chunk"}, run_rwkv7, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                     namespace kb = kernel_bench;
                     // The layer's parameterisation: a = −κ̂, b = κ̂ ⊙ a_in, w = −e^{−1/2} σ(·).
                     auto kappa = kb::l2_normalized({B, T, H, D});
                     return KernelBenchInputs{{{"r", kb::normal({B, T, H, D})},
                                               {"w", -0.6065306597126334 * kb::unit_gate({B, T, H, D})},
                                               {"k", kb::normal({B, T, H, D})},
                                               {"v", kb::normal({B, T, H, D})},
                                               {"a", -kappa},
                                               {"b", kappa * kb::unit_gate({B, T, H, D})}}};
                   }});
}

}  // namespace mnemo
