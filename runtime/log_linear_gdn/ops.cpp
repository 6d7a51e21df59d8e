// Kernel ops in the fixture format (shared/fixtures/kernels/README.md), forms "recurrent", "chunk" and "fused_chunk"
// (the chunk form with its level states carried by chunk state passes, as a GPU runs it: scan_levels in
// runtime/log_linear_gdn/chunk.cpp, the state-pass kernel's block code over the host grid on CPU tensors). The chunked
// forms take power-of-two chunks (aligned with the Fenwick levels; another requested size runs at the largest power of
// two below it, so that `check-kernel --chunk-sizes 7,...` still runs a chunked form, and check-kernel prints the size
// that ran):
//   log_linear_attn: flash-linear-attention's naive_log_linear_attn (log-linear Mamba-2, the scalar-decay mode):
//     q, k [B,T,H,K], v [B,T,H,V], g [B,T,H] log decay, level_scales [B,T,H,NL]; params.scale (1.0 when absent,
//     fla's default). Output o.
//   log_linear_gdn: log-linear Gated DeltaNet: q, k [B,T,H,K] (l2-normalised), v [B,T,H,V], beta, g [B,T,H],
//     level_weights [B,T,H,NL]; params.scale (K^-1/2 when absent). Outputs o and final_state [B,H,NL,K,V] (the
//     level states after the Fenwick carry to position T).
#include <cmath>

#include "runtime/kernels/op_helpers.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"

namespace mnemo {

static int64_t log_linear_op_chunk(int64_t chunk) {
  int64_t c = 1;
  while (c * 2 <= chunk) c *= 2;
  return chunk < 1 ? chunk : c;  // < 1: the kernel's own error
}

static TensorMap run_log_linear_attn(const TensorMap& in, const json& params, const std::string& form, int64_t chunk) {
  namespace a = kernel_op_args;
  const std::string op = "log_linear_attn";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto g = a::required(in, op, "g"), lam = a::required(in, op, "level_scales");
  const double scale = params.is_object() && params.contains("scale") ? a::scale(params, op, 0) : 1.0;
  const a::StatePassForms forms(op, form);
  auto r = forms.chunked() ? log_linear_gdn_chunk(q, k, v, {}, g, lam, {}, 0, scale, log_linear_op_chunk(chunk))
                           : log_linear_gdn_recurrent(q, k, v, {}, g, lam, {}, 0, scale);
  return {{"o", r.o}};
}

static TensorMap run_log_linear_gdn(const TensorMap& in, const json& params, const std::string& form, int64_t chunk) {
  namespace a = kernel_op_args;
  const std::string op = "log_linear_gdn";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto beta = a::required(in, op, "beta"), g = a::required(in, op, "g"), lam = a::required(in, op, "level_weights");
  if (q.dim() != 4) throw Error("kernel op 'log_linear_gdn': q must be [B,T,H,K], got " + c10::str(q.sizes()));
  const double scale = a::scale(params, op, q.size(3));
  const a::StatePassForms forms(op, form);
  auto r = forms.chunked() ? log_linear_gdn_chunk(q, k, v, beta, g, lam, {}, 0, scale, log_linear_op_chunk(chunk))
                           : log_linear_gdn_recurrent(q, k, v, beta, g, lam, {}, 0, scale);
  return {{"o", r.o}, {"final_state", r.final_state}};
}

void register_log_linear_gdn_ops(KernelOpRegistry& r) {
  namespace kb = kernel_bench;
  r.add(KernelOp{"log_linear_attn", {"recurrent", "chunk", "fused_chunk"}, run_log_linear_attn,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})}, {"g", kb::log_decay({B, T, H})},
                                             {"level_scales", kb::unit_gate({B, T, H, log_linear_num_levels(T)})}},
                                            {{"scale", 1.0 / std::sqrt(static_cast<double>(D))}}};
                 },
                 log_linear_op_chunk});
  r.add(KernelOp{"log_linear_gdn", {"recurrent", "chunk", "fused_chunk"}, run_log_linear_gdn,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})},
                                             {"k", kb::l2_normalized({B, T, H, D})}, {"v", kb::normal({B, T, H, D})},
                                             {"beta", kb::unit_gate({B, T, H})}, {"g", kb::log_decay({B, T, H})},
                                             {"level_weights", kb::unit_gate({B, T, H, log_linear_num_levels(T)})}}};
                 },
                 log_linear_op_chunk});
}

}  // namespace mnemo
