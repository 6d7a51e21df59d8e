// MesaNet kernels (docs/models.md#mesanet; von Oswald et al., "MesaNet: Sequence Modeling by Locally Optimal
// Test-Time Training", arXiv 2506.05233 §3; fixture op `mesa_net`). Per batch b and head h, with a scalar log decay
// g_t <= 0 and an input gate β_t, two states (row-vector convention, read after write):
//   H_t = e^{g_t} H_{t-1} + β_t k_tᵀ k_t              [K, K], symmetric positive semi-definite
//   G_t = e^{g_t} G_{t-1} + β_t k_tᵀ v_t              [K, V]
//   x_t ≈ (H_t + Diag(λ))^{-1} q_t                     by `cg_steps` conjugate-gradient steps from x = 0
//   o_t = x_t G_t
// λ [H, K] > 0 is the regulariser per head and key channel. The CG steps (mesa_net_conjugate_gradient) are plain CG
// (arXiv 2506.05233 §3) with 1e-5 added to both denominators as in flash-linear-attention's chunk kernel,
// α = δ / (pᵀ A p + 1e-5) and β = δ' / (δ + 1e-5), so that steps after convergence change nothing.
// Gradients (MesaNetGradient): by default implicit differentiation of the solved system, as flash-linear-attention's
// kernel does (arXiv 2506.05233 §3): with A_t = H_t + Diag(λ) symmetric and dx_t = do_t G_tᵀ, one adjoint solve
// u_t = A_t⁻¹ dx_t by the same CG steps gives dq_t = u_t, dλ = −Σ_t u_t ⊙ x_t and dH_t = −u_tᵀ x_t, which reach
// k, β, g and H_0 through the state recurrence. The forward records no graph and keeps only the inputs, x and the
// solve operator (the chunk form: H's chunk-boundary states); the backward recomputes the two scans with a graph.
// It has no second derivative (a backward under create_graph throws mnemo::Error). MesaNetGradient::kUnrolled is
// plain autograd through the CG steps instead (the gradient of the truncated solver; the two agree once the solve
// has converged), kept as the reference for the implicit one.
// Layout: q, k [B, T, H, K] (l2-normalised by the caller), v [B, T, H, V], g, beta [B, T, H], lambda [H, K], states
// h_kk [B, H, K, K] and h_kv [B, H, K, V] (undefined = zeros). Both forms compute in fp32, or fp64 when any input is
// fp64; o is returned in v's dtype, the final states in the compute dtype.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>

namespace mnemo {

enum class MesaNetGradient { kImplicit, kUnrolled };

struct MesaNetResult {
  torch::Tensor o;         // [B, T, H, V]
  torch::Tensor final_kk;  // H_T [B, H, K, K]
  torch::Tensor final_kv;  // G_T [B, H, K, V]
};

// Token-by-token recurrence of the two states, then the CG solve of every token (batched over tokens; each token's
// solve reads only its own H_t). T == 1 is the O(1) decode step.
MesaNetResult mesa_net_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                                 const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                                 MesaNetGradient gradient = MesaNetGradient::kImplicit, double cg_eps = 1e-5);

// Chunked form: every CG step needs H_t p_t for all t, and H_t p_t = Σ_{s<=t} e^{Σ_{s<r<=t} g_r} β_s k_s (k_sᵀ p_t)
// is scalar-decay linear attention with query p_t, key β_s k_s and value k_s. H's chunk-boundary states and the
// in-chunk decayed keys do not depend on p_t and are built once; each CG step is then two batched matmuls per
// chunk (three where the chunk's decay span is too wide to factorise). o_t = x_t G_t is one more such scan with value
// v_s (runtime/retnet simple_gla_chunk). Exact rewrite of mesa_net_recurrent with the same CG steps. `cg_eps` is the term added to CG's denominators (1e-5 as in
// flash-linear-attention; a tighter one only for checks of converged solves).
MesaNetResult mesa_net_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                             const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                             int64_t chunk_size, MesaNetGradient gradient = MesaNetGradient::kImplicit,
                             double cg_eps = 1e-5);

// `steps` CG steps for A x = rhs over the last dim of rhs, from x = 0, with A given by its product apply_a(p)
// (symmetric positive definite), `eps` added to both denominators. Shared by both forms so that they take identical
// steps; updates in place when no graph is recorded.
torch::Tensor mesa_net_conjugate_gradient(const std::function<torch::Tensor(const torch::Tensor&)>& apply_a,
                                          const torch::Tensor& rhs, int64_t steps, double eps = 1e-5);

// What a form supplies to the kernel (mesa_net_implicit in naive.cpp, and the unrolled path). Each method is
// differentiable by autograd when a graph is recorded (the unrolled gradient); the implicit kernel calls all but
// scan() without one. Tensors are in the compute dtype; `lam` is λ [H, K].
class MesaNetForm {
 public:
  virtual ~MesaNetForm() = default;
  // Builds the solve operator A_t = H_t + Diag(λ) from k, β, g, λ and H_0 (defined), and H_T.
  virtual void build(const torch::Tensor& k, const torch::Tensor& beta, const torch::Tensor& g,
                     const torch::Tensor& lam, const torch::Tensor& h_kk0) = 0;
  // [B, T, H, K] <-> the layout `apply` works in (reductions over the last dim are per token).
  virtual torch::Tensor to_layout(const torch::Tensor& x) const = 0;
  virtual torch::Tensor from_layout(const torch::Tensor& x, int64_t T) const = 0;
  virtual torch::Tensor apply(const torch::Tensor& p) const = 0;  // A_t p_t, in the layout
  // H_T, handed over: the form keeps no reference to it. (The implicit-gradient node keeps the form for its
  // backward; a form still holding its own output would tie that output's graph to itself and never be freed.)
  virtual torch::Tensor take_final_kk() = 0;
  // Readout o_t = x_t G_t and G_T.
  virtual std::pair<torch::Tensor, torch::Tensor> readout(const torch::Tensor& x, const torch::Tensor& k,
                                                          const torch::Tensor& v, const torch::Tensor& g,
                                                          const torch::Tensor& beta, const torch::Tensor& h_kv0) = 0;
  // dx_t = do_t G_tᵀ.
  virtual torch::Tensor readout_grad(const torch::Tensor& d_o, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& h_kv0) = 0;
  // Differentiable (under the caller's graph): [x_t H_t, x_t G_t] for every t and [H_T, G_T], with H and G
  // concatenated along the last dim ([B, T, H, K + V] and [B, H, K, K + V]).
  virtual std::pair<torch::Tensor, torch::Tensor> scan(const torch::Tensor& x, const torch::Tensor& k,
                                                       const torch::Tensor& v, const torch::Tensor& g,
                                                       const torch::Tensor& beta, const torch::Tensor& h0) = 0;
};

// The kernel with implicit gradients over a form (a torch::autograd::Function); inputs already checked, T >= 1.
MesaNetResult mesa_net_implicit(const std::shared_ptr<MesaNetForm>& form, const torch::Tensor& q,
                                const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                                const torch::Tensor& beta, const torch::Tensor& lambda, const torch::Tensor& h_kk0,
                                const torch::Tensor& h_kv0, int64_t cg_steps, double cg_eps);
// Both forms' driver: the compute dtype, T == 0, then mesa_net_implicit or autograd through the steps.
MesaNetResult mesa_net_run(const std::shared_ptr<MesaNetForm>& form, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& beta,
                           const torch::Tensor& lambda, const torch::Tensor& h_kk0, const torch::Tensor& h_kv0,
                           int64_t cg_steps, MesaNetGradient gradient, double cg_eps);

// Shape checks shared by both forms; throw mnemo::Error naming the tensor and its shape, or cg_steps.
void check_mesa_net_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                           const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps);

}  // namespace mnemo
