// Fixture op `gated_delta_product` (flash-linear-attention's naive_recurrent_gated_delta_product: q [B,T,H,K],
// k [B,T·n_h,H,K], v [B,T·n_h,H,V], beta [B,T·n_h,H], g [B,T,H] (optional), optional initial_state [B,H,K,V];
// params.num_householder = n_h (default 2), params.scale (default K^-1/2)). Forms: recurrent, chunk, fused_chunk (the
// delta rule's fused chunk kernels over the same rows, as the mixer runs them on a GPU).
#include "runtime/delta_product/delta_product.h"
#include "runtime/kernels/op_helpers.h"

namespace mnemo {

static TensorMap run_gated_delta_product(const TensorMap& in, const json& params, const std::string& form,
                                         int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "gated_delta_product";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto beta = a::required(in, op, "beta"), g = a::optional(in, "g"), s0 = a::optional(in, "initial_state");
  int64_t n = 2;
  if (params.is_object() && params.contains("num_householder")) {
    if (!params["num_householder"].is_number_integer())
      throw Error("kernel op '" + op + "': params.num_householder must be an integer, got " +
                  params["num_householder"].dump());
    n = params["num_householder"].get<int64_t>();
  }
  const double scale = a::scale(params, op, q.size(-1));
  auto r = form == "fused_chunk" ? gated_delta_product_chunk_fused(q, k, v, beta, g, s0, scale, n, chunk_size)
           : a::is_chunk_form(op, form) ? gated_delta_product_chunk(q, k, v, beta, g, s0, scale, n, chunk_size)
                                        : gated_delta_product_recurrent(q, k, v, beta, g, s0, scale, n);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

void register_delta_product_ops(KernelOpRegistry& r) {
  r.add(KernelOp{"gated_delta_product", {"recurrent", "chunk", "fused_chunk"}, run_gated_delta_product,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})},
                                             {"k", kb::l2_normalized({B, 2 * T, H, D})},
                                             {"v", kb::normal({B, 2 * T, H, D})}, {"beta", kb::unit_gate({B, 2 * T, H})},
                                             {"g", kb::log_decay({B, T, H})}}};
                 }});
}

}  // namespace mnemo
