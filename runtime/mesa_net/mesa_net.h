// MesaNet kernels (docs/models.md#mesanet; von Oswald et al., "MesaNet: Sequence Modeling by Locally Optimal
// Test-Time Training", arXiv 2506.05233 §3; fixture op `mesa_net`). Per batch b and head h, with a scalar log decay
// g_t <= 0 and an input gate β_t, two states (row-vector convention, read after write):
//   H_t = e^{g_t} H_{t-1} + β_t k_tᵀ k_t              [K, K], symmetric positive semi-definite
//   G_t = e^{g_t} G_{t-1} + β_t k_tᵀ v_t              [K, V]
//   x_t ≈ (H_t + Diag(λ))^{-1} q_t                     by `cg_steps` conjugate-gradient steps from x = 0
//   o_t = x_t G_t
// λ [H, K] > 0 is the regulariser per head and key channel. The CG steps (mesa_net_conjugate_gradient) are plain CG
// (arXiv 2506.05233 §3) with 1e-5 added to both denominators as in flash-linear-attention's chunk kernel,
// α = δ / (pᵀ A p + 1e-5) and β = δ' / (δ + 1e-5), so that steps after convergence change nothing; a fixed number of
// steps keeps the whole computation differentiable by plain autograd (the gradient is that of the truncated solver,
// not of the exact solve).
// Layout: q, k [B, T, H, K] (l2-normalised by the caller), v [B, T, H, V], g, beta [B, T, H], lambda [H, K], states
// h_kk [B, H, K, K] and h_kv [B, H, K, V] (undefined = zeros). Both forms compute in fp32, or fp64 when any input is
// fp64; o is returned in v's dtype, the final states in the compute dtype.
#pragma once
#include <torch/torch.h>

#include <functional>

namespace mnemo {

struct MesaNetResult {
  torch::Tensor o;         // [B, T, H, V]
  torch::Tensor final_kk;  // H_T [B, H, K, K]
  torch::Tensor final_kv;  // G_T [B, H, K, V]
};

// Token-by-token recurrence of the two states, then the CG solve of every token (batched over tokens; each token's
// solve reads only its own H_t). T == 1 is the O(1) decode step.
MesaNetResult mesa_net_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                                 const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps);

// Chunked form: every CG step needs H_t p_t for all t, and H_t p_t = Σ_{s<=t} e^{Σ_{s<r<=t} g_r} β_s k_s (k_sᵀ p_t)
// is scalar-decay linear attention with query p_t, key β_s k_s and value k_s (runtime/retnet simple_gla_chunk);
// o_t = x_t G_t is one more such call with value v_s. Exact rewrite of mesa_net_recurrent with the same CG steps.
MesaNetResult mesa_net_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                             const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                             int64_t chunk_size);

// `steps` CG steps for A x = rhs over the last dim of rhs, from x = 0, with A given by its product apply_a(p)
// (symmetric positive definite). Shared by both forms so that they take identical steps.
torch::Tensor mesa_net_conjugate_gradient(const std::function<torch::Tensor(const torch::Tensor&)>& apply_a,
                                          const torch::Tensor& rhs, int64_t steps);

// Shape checks shared by both forms; throw mnemo::Error naming the tensor and its shape, or cg_steps.
void check_mesa_net_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                           const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps);

}  // namespace mnemo
