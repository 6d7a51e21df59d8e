// Fixture op `mamba3_siso`: the Mamba-3 SISO layer core as mamba_ssm's mamba3_siso_combined takes it, in mnemo's
// [B, T, H] layout: q, k [B,T,H,N] (already RMS-normalised), v [B,T,H,P], adt = A·Δ [B,T,H], dt [B,T,H],
// trap [B,T,H] (pre-sigmoid: λ = σ(trap)), q_bias, k_bias [H,N], angles [B,T,H,R] (pre-tanh: θ = π tanh(angles)),
// optional D [H], z [B,T,H,P] and initial_h [B,H,P,N], initial_k [B,H,N], initial_v [B,H,P], initial_angle [B,H,R].
//   y = (scan(q + q_bias, k + k_bias, v, adt, dt, λ, θ) + D v) ⊙ SiLU(z)
// Outputs: o, final_state (h), final_k, final_v, final_angle. Forms: recurrent, chunk, fused_chunk (the scan on GLA's
// fused chunk kernels, as the mixer runs it on a GPU).
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
  auto r = form == "fused_chunk"          ? mamba3_chunk(x, s0, chunk_size, GlaChunkRoute::kFusedKernel)
           : a::is_chunk_form(op, form) ? mamba3_chunk(x, s0, chunk_size)
                                        : mamba3_recurrent(x, s0);
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

static TensorMap run_mamba3_mimo(const TensorMap& in, const json&, const std::string& form, int64_t chunk_size) {
  namespace a = kernel_op_args;
  const std::string op = "mamba3_mimo";
  auto q = a::required(in, op, "q"), k = a::required(in, op, "k"), v = a::required(in, op, "v");
  check_shape(op, "q", q, {-1, -1, -1, -1, -1});
  const int64_t R = q.size(2), H = q.size(3), N = q.size(4);
  check_shape(op, "v", v, {q.size(0), q.size(1), H, -1});
  const int64_t P = v.size(3);
  auto per_rank = [&](const char* name, const std::vector<int64_t>& shape) {  // [H, R, X] -> [R, H, X]
    auto t = a::required(in, op, name);
    check_shape(op, name, t, shape);
    return t.permute({1, 0, 2});
  };
  auto q_bias = per_rank("q_bias", {H, R, N}), k_bias = per_rank("k_bias", {H, R, N});
  auto mimo_x = per_rank("mimo_x", {H, R, P}), mimo_z = per_rank("mimo_z", {H, R, P});
  auto mimo_o = per_rank("mimo_o", {H, R, P});
  auto values = v.unsqueeze(2) * mimo_x;  // [B, T, R, H, P]
  Mamba3Inputs x{q + q_bias, k + k_bias, values, a::required(in, op, "adt"), a::required(in, op, "dt"),
                 torch::sigmoid(a::required(in, op, "trap")), torch::tanh(a::required(in, op, "angles")) * M_PI};
  auto initial_v = a::optional(in, "initial_v");
  if (initial_v.defined()) check_shape(op, "initial_v", initial_v, {q.size(0), H, P});
  Mamba3State s0{a::optional(in, "initial_h"), a::optional(in, "initial_k"),
                 initial_v.defined() ? initial_v.unsqueeze(1) * mimo_x : torch::Tensor(), a::optional(in, "initial_angle")};
  auto r = a::is_chunk_form(op, form) ? mamba3_mimo_chunk(x, s0, chunk_size) : mamba3_mimo_recurrent(x, s0);
  auto y = r.o;
  auto D = a::optional(in, "D"), z = a::optional(in, "z");
  if (D.defined()) {
    check_shape(op, "D", D, {H});
    y = y + D.view({1, 1, 1, H, 1}) * values;
  }
  if (z.defined()) {
    check_shape(op, "z", z, v.sizes().vec());
    y = y * torch::silu(z.unsqueeze(2) * mimo_z);
  }
  return {{"o", (y * mimo_o).sum(2)}, {"final_state", r.state.h}, {"final_k", r.state.k_prev},
          {"final_v", v.select(1, v.size(1) - 1)}, {"final_angle", r.state.angle}};
}

void register_mamba3_ops(KernelOpRegistry& r) {
  // Bench inputs: N = P = D, a quarter of the channel pairs rotated, Δ = softplus(N(-2, 1)), A = −softplus(N(0, 1)).
  r.add(KernelOp{"mamba3_siso", {"recurrent", "chunk", "fused_chunk"}, run_mamba3_siso,
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
  // Bench inputs: rank 2, the SISO op's scales, the projections near fla's initialisation.
  r.add(KernelOp{"mamba3_mimo", {"recurrent", "chunk"}, run_mamba3_mimo,
                 [](int64_t B, int64_t T, int64_t H, int64_t D) {
                   namespace kb = kernel_bench;
                   const int64_t R = 2;
                   auto dt = torch::softplus(kb::normal({B, T, H}) - 2.0);
                   return KernelBenchInputs{{{"q", kb::l2_normalized({B, T, R, H, D})},
                                             {"k", kb::l2_normalized({B, T, R, H, D})},
                                             {"v", kb::normal({B, T, H, D})},
                                             {"adt", -torch::softplus(kb::normal({B, T, H})) * dt},
                                             {"dt", dt},
                                             {"trap", kb::normal({B, T, H})},
                                             {"q_bias", torch::ones({H, R, D})},
                                             {"k_bias", torch::ones({H, R, D})},
                                             {"mimo_x", torch::full({H, R, D}, 0.5)},
                                             {"mimo_z", torch::ones({H, R, D})},
                                             {"mimo_o", torch::full({H, R, D}, 0.5)},
                                             {"angles", kb::normal({B, T, H, std::max<int64_t>(1, D / 4)})}}};
                 }});
}

}  // namespace mnemo
