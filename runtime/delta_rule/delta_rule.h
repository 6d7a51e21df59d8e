// DeltaNet and Gated DeltaNet kernels (docs/models.md#deltanet, docs/models.md#gated-deltanet; fixture ops `delta_rule`,
// `gated_delta_rule`). Row-vector fla convention, state S [B, H, K, V], read after write:
//   S' = exp(g_t) S_{t-1}                    (g ≡ 0, i.e. undefined, for DeltaNet)
//   u_t = beta_t (v_t - k_t S')
//   S_t = S' + k_t^T u_t
//   o_t = (scale q_t) S_t
// Layout: q, k [B, T, H, K], v [B, T, H, V], beta and g [B, T, H]; g is a log decay (<= 0).
// Both forms are differentiable (plain autograd ops) and compute in fp32, or fp64 when any input
// is fp64; o is returned in v's dtype, the final state in the compute dtype.
#pragma once
#include <torch/torch.h>

namespace mnemo {

struct DeltaRuleResult {
  torch::Tensor o;            // [B, T, H, V]
  torch::Tensor final_state;  // [B, H, K, V]
};

// Token-by-token recurrence: O(T) sequential steps; T == 1 is the O(1) decode step.
// g and initial_state may be undefined (no decay; zero state).
DeltaRuleResult delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& beta, const torch::Tensor& g,
                                     const torch::Tensor& initial_state, double scale);

// Chunk-wise WY/UT form with chunks of `chunk_size` tokens (a shorter last chunk is padded with
// inert zero tokens: k = 0, beta = 0, g = 0). Exact rewrite of the recurrence.
DeltaRuleResult delta_rule_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& beta, const torch::Tensor& g,
                                 const torch::Tensor& initial_state, double scale, int64_t chunk_size);

// One chunk's state update alone, head-major (k [B, H, n, K], v [B, H, n, V], beta and g [B, H, n], S [B, H, K, V]):
// e^{b_n} S + (K ⊙ e^{b_n − b})ᵀ (U − W S) with U, W of the WY form above, the final state of delta_rule_chunk over
// these n tokens without their outputs. Γ is formed from clamped differences of b, so no factorisation check reads
// the decays back to the host. For a caller that reads the state only, one chunk at a time (Hope's memories,
// runtime/hope/chunk.cpp).
torch::Tensor delta_rule_chunk_step(const torch::Tensor& S, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& beta, const torch::Tensor& g);

// The fused chunk kernels (chunk_kernel.cuh: one block per sequence, head and V tile, the chunk loop inside) as one
// autograd node with a hand-derived backward. On CPU tensors the kernels' block code runs over a sequential host grid
// (the decomposition CI checks against delta_rule_chunk); on CUDA tensors the CUDA kernels run (builds with
// MNEMO_CUDA_KERNELS). `cu_seqlens` (optional, int32/int64 [N + 1], fla's convention): B = 1 and N sequences packed
// along T, each with its own state (initial_state and the final state are then [N, H, K, V]). `value_tile`: V columns
// per block (0 = the default, 64).
DeltaRuleResult delta_rule_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& beta, const torch::Tensor& g,
                                       const torch::Tensor& initial_state, double scale, int64_t chunk_size,
                                       const torch::Tensor& cu_seqlens = {}, int64_t value_tile = 0);

// True where delta_rule_chunk_fused runs as a CUDA kernel: a CUDA tensor in a build with the kernels linked.
bool delta_rule_fused_on_device(const torch::Tensor& q);

// Whether a mixer built on the delta rule (DeltaNet, Gated DeltaNet, Gated DeltaProduct, MoM's memories) runs its
// chunk form as delta_rule_chunk_fused on tensors like `like`: on CUDA tensors in builds with the kernels, and on CPU
// tensors inside a DeltaRuleKernelHostScope (the kernels' block code over the host grid: how the CPU tests reach the
// route a GPU takes); the eager chunk form otherwise.
bool delta_rule_fused_route(const torch::Tensor& like);
class DeltaRuleKernelHostScope {
 public:
  DeltaRuleKernelHostScope();
  ~DeltaRuleKernelHostScope();
  DeltaRuleKernelHostScope(const DeltaRuleKernelHostScope&) = delete;
  DeltaRuleKernelHostScope& operator=(const DeltaRuleKernelHostScope&) = delete;

 private:
  bool previous_;
};

// Shared argument checks (shapes, chunk size); throw mnemo::Error naming the tensor and shape.
void check_delta_rule_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& beta, const torch::Tensor& g,
                             const torch::Tensor& initial_state);

}  // namespace mnemo
