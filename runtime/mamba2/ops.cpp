// Fixture op `mamba2_ssd` (ssd_minimal_discrete; `block_len` in params only sets the chunking). Forms: recurrent,
// chunk (eager) and fused_chunk (the gated-linear-attention fused kernel: the host run on CPU tensors).
#include "runtime/kernels/op_helpers.h"
#include "runtime/mamba2/mamba2.h"

namespace mnemo {

static TensorMap run_mamba2_ssd(const TensorMap& in, const json& params, const std::string& form,
                                int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "mamba2_ssd";
  auto x = a::required(in, op, "x"), dt = a::required(in, op, "dt"), A = a::required(in, op, "A");
  auto B = a::required(in, op, "B"), C = a::required(in, op, "C");
  auto s0 = a::optional(in, "initial_state");
  auto r = form == "fused_chunk"            ? mamba2_ssd_chunk_fused(x, dt, A, B, C, s0, chunk_size)
           : a::is_chunk_form(op, form) ? mamba2_ssd_chunk(x, dt, A, B, C, s0, chunk_size)
                                        : mamba2_ssd_recurrent(x, dt, A, B, C, s0);
  return {{"y", r.o}, {"final_state", r.final_state}};
}

void register_mamba2_ops(KernelOpRegistry& r) {
  // Bench inputs: B/C per head (the op's layout), d_state = head dim = D, dt = softplus(N(-2, 1)).
  r.add(KernelOp{"mamba2_ssd", {"recurrent", "chunk", "fused_chunk"}, run_mamba2_ssd, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"x", kb::normal({B, T, H, D})},
                                             {"dt", torch::softplus(kb::normal({B, T, H}) - 2.0)},
                                             {"A", -torch::exp(kb::normal({H}) * 0.5)},
                                             {"B", kb::normal({B, T, H, D})},
                                             {"C", kb::normal({B, T, H, D})}}};
                 }});
}

}  // namespace mnemo
