// Fixture op `forgetting_attn` (flash-linear-attention's naive_forgetting_attn: q, k, v [B,T,H,D], g [B,T,H] log
// forget gates; scale D^-1/2 unless params.scale says otherwise; output o [B,T,H,D], no state). Forms: recurrent
// (token by token) and chunk (the parallel form with query blocks of the chunk size).
#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

static TensorMap run_forgetting_attn(const TensorMap& in, const json& params, const std::string& form,
                                     int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "forgetting_attn";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto g = a::required(in, op, "g");
  const double scale = a::scale(params, op, q.size(-1));
  if (!a::is_chunk_form(op, form)) return {{"o", forgetting_attention_recurrent(q, k, v, g, scale)}};
  auto c = g.cumsum(1);
  return {{"o", forgetting_attention(q, k, v, c, c, scale, chunk_size)}};
}

void register_forgetting_attn_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"forgetting_attn", {"recurrent", "chunk"}, run_forgetting_attn,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})}, {"g", kb::log_decay({B, T, H})}}};
                 }});
}

}  // namespace mnemo
