// Fixture op `mamba3_siso`: the Mamba-3 SISO layer core as mamba_ssm's mamba3_siso_combined takes it, in mnemo's
// [B, T, H] layout: q, k [B,T,H,N] (already RMS-normalised), v [B,T,H,P], adt = A·Δ [B,T,H], dt [B,T,H],
// trap [B,T,H] (pre-sigmoid: λ = σ(trap)), q_bias, k_bias [H,N], angles [B,T,H,R] (pre-tanh: θ = π tanh(angles)),
// optional D [H], z [B,T,H,P] and initial_h [B,H,P,N], initial_k [B,H,N], initial_v [B,H,P], initial_angle [B,H,R].
//   y = (scan(q + q_bias, k + k_bias, v, adt, dt, λ, θ) + D v) ⊙ SiLU(z)
// Outputs: o, final_state (h), final_k, final_v, final_angle. Forms: recurrent, chunk.
#include <cmath>

#include "runtime/kernels/op_helpers.h"
#include "runtime/mamba3/mamba3.h"

namespace mnemo {

static TensorMap run_mamba3_siso(const TensorMap& in, const json&, const std::string& form, int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "mamba3_siso";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  auto q_bias = a::required(in, op, "q_bias"), k_bias = a::required(in, op, "k_bias");
  check_shape(op, "q_bias", q_bias, {q.size(2), q.size(3)});
  check_shape(op, "k_bias", k_bias, {k.size(2), k.size(3)});
  Mamba3Inputs x{q + q_bias, k + k_bias, v, a::required(in, op, "adt"), a::required(in, op, "dt"),
                 torch::sigmoid(a::required(in, op, "trap")), torch::tanh(a::required(in, op, "angles")) * M_PI};
  Mamba3State s0{a::optional(in, "initial_h"), a::optional(in, "initial_k"), a::optional(in, "initial_v"),
                 a::optional(in, "initial_angle")};
  auto r = a::is_chunk_form(op, form) ? mamba3_chunk(x, s0, chunk_size) : mamba3_recurrent(x, s0);
  auto y = r.o;
  auto D = a::optional(in, "D"), z = a::optional(in, "z");
  if (D.defined()) {
    check_shape(op, "D", D, {v.size(2)});
    y = y + D.view({1, 1, -1, 1}) * v;
  }
  if (z.defined()) {
    check_shape(op, "z", z, v.sizes().vec());
    y = y * torch::silu(z);
  }
  return {{"o", y}, {"final_state", r.state.h}, {"final_k", r.state.k_prev}, {"final_v", r.state.v_prev},
          {"final_angle", r.state.angle}};
}

void register_mamba3_ops(KernelOpRegistry& r) {
  // Bench inputs: N = P = D, a quarter of the channel pairs rotated, Δ = softplus(N(-2, 1)), A = −softplus(N(0, 1)).
  r.add(KernelOp{"mamba3_siso", {"recurrent", "chunk"}, run_mamba3_siso,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   auto dt = torch::softplus(kb::normal({B, T, H}) - 2.0);
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, H, D})},
                                             {"k", kb::l2_normalized({B, T, H, D})},
                                             {"v", kb::normal({B, T, H, D})},
                                             {"adt", -torch::softplus(kb::normal({B, T, H})) * dt},
                                             {"dt", dt},
                                             {"trap", kb::normal({B, T, H})},
                                             {"q_bias", torch::ones({H, D})},
                                             {"k_bias", torch::ones({H, D})},
                                             {"angles", kb::normal({B, T, H, std::max<int64_t>(1, D / 4)})}}};
                 }});
}

}  // namespace mnemo
