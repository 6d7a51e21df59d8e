// Fixture op `mesa_net` (flash-linear-attention's naive_mesa_net_CG: q, k [B,T,H,K] l2-normalised, v [B,T,H,V],
// g [B,T,H] log decay, beta [B,T,H], lamb [H,K], optional h_kk_init [B,H,K,K] and h_kv_init [B,H,K,V];
// params.max_cg_steps, 30 when absent). Outputs o, h_kk, h_kv. Forms: recurrent, chunk, fused_chunk (the chunk form
// with the scans of its statistics on the state-pass kernel, as a GPU runs it: runtime/kernels/state_pass_kernel.cuh;
// its block code over the host grid on CPU tensors).
#include <string>

#include "runtime/kernels/op_helpers.h"
#include "runtime/mesa_net/mesa_net.h"

namespace mnemo {

static int64_t mesa_net_cg_steps(const json& params) {
  if (!params.is_object() || !params.contains("max_cg_steps") || params["max_cg_steps"].is_null()) return 30;
  if (!params["max_cg_steps"].is_number_integer())
    throw Error("kernel op 'mesa_net': params.max_cg_steps must be an integer, got " + params["max_cg_steps"].dump());
  return params["max_cg_steps"].get<int64_t>();
}

static TensorMap run_mesa_net(const TensorMap& in, const json& params, const std::string& form, int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "mesa_net";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto g = a::required(in, op, "g"), beta = a::required(in, op, "beta"), lamb = a::required(in, op, "lamb");
  auto h_kk = a::optional(in, "h_kk_init"), h_kv = a::optional(in, "h_kv_init");
  const int64_t steps = mesa_net_cg_steps(params);
  const a::StatePassForms forms(op, form);
  auto r = forms.chunked() ? mesa_net_chunk(q, k, v, g, beta, lamb, h_kk, h_kv, steps, chunk_size)
                           : mesa_net_recurrent(q, k, v, g, beta, lamb, h_kk, h_kv, steps);
  return {{"o", r.o}, {"h_kk", r.final_kk}, {"h_kv", r.final_kv}};
}

void register_mesa_net_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"mesa_net", {"recurrent", "chunk", "fused_chunk"}, run_mesa_net, [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})},
                                             {"k", kb::l2_normalized({B, T, H, D})}, {"v", kb::normal({B, T, H, D})},
                                             {"g", kb::log_decay({B, T, H})}, {"beta", kb::unit_gate({B, T, H})},
                                             {"lamb", torch::softplus(kb::normal({H, D})) + 0.25}},
                                            {{"max_cg_steps", 30}}};
                 }});
}

}  // namespace mnemo
