// Fixture op `path_attn` (flash-linear-attention's naive_path_attn: q [B,T,HQ,D], k, w [B,T,H,D], v [B,T,H,V],
// beta [B,T,H], g [B,T,HQ] log forget gates (optional: no gate when absent); scale D^-1/2 unless params.scale says
// otherwise; output o [B,T,HQ,V], no state). Forms: recurrent (token by token, the decode form) and chunk (query
// chunks of the chunk size).
#include "runtime/kernels/op_helpers.h"
#include "runtime/path_attn/path_attn.h"

namespace mnemo {

static TensorMap run_path_attn(const TensorMap& in, const json& params, const std::string& form,
                               int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "path_attn";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto w = a::required(in, op, "w"), beta = a::required(in, op, "beta");
  auto g = a::optional(in, "g");
  const double scale = a::scale(params, op, q.size(-1));
  torch::Tensor c;
  if (g.defined()) c = g.cumsum(1);
  auto r = a::is_chunk_form(op, form) ? path_attention(q, k, v, w, beta, c, c, scale, chunk_size)
                                      : path_attention_recurrent(q, k, v, w, beta, c, c, scale);
  return {{"o", r.o}};
}

void register_path_attn_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"path_attn", {"recurrent", "chunk"}, run_path_attn,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})}, {"w", kb::l2_normalized({B, T, H, D})},
                                             {"beta", 2.0 * kb::unit_gate({B, T, H})},
                                             {"g", kb::log_decay({B, T, H})}}};
                 }});
}

}  // namespace mnemo
