// DeepTransformers (DT), SWDT and DOT: exponential-kernel memories with the linear memory kept in
// kernel form (docs/models.md#deeptransformers-swdt-and-dot). κ(k, q) = exp(s_h k̂·q̂), k̂, q̂ l2-normalised, s_h > 0 per head.
// Layouts: q, k [B, T, H, d], v [B, T, H, dv], gates [B, T, H]; caches [B, H, N, ...] (N past tokens).
// All math in fp32 (fp64 when v is fp64); y is returned in v's dtype.
#pragma once
#include <torch/torch.h>

namespace mnemo {

// DT / SWDT (exact, blocked attention): y_t = Σ_{i ≤ t} w_{t,i} κ(k_i, q_t) v_i with
//   w_{t,i} = γ_i Σ_{n=i}^{min(t, i+c-1)} L[t, n] η_n,  L[t, n] = Π_{r=n+1}^{t} α_r    (DT: c = 1, γ ≡ 1)
// Weights are kept in linear space (every factor is in (0, 1], w ≤ c); cached tokens carry their
// weight at the end of the previous call (`w`), decayed by Π α and topped up while still in the window.
struct KernelAttnCache {
  torch::Tensor k, v, w, g;  // [B,H,N,d], [B,H,N,dv], weight [B,H,N], γ [B,H,N]; undefined = empty
};
struct KernelAttnResult {
  torch::Tensor y;  // [B, T, H, dv]
  KernelAttnCache cache;
};
// log_alpha, eta, gamma: [B, T, H] (gamma undefined: γ ≡ 1); s: [H]. row_max: subtract the per-row
// maximum logit before exp (the output RMSNorm makes y's scale irrelevant, docs/models.md#deeptransformers-swdt-and-dot, docs/models.md#numerical-stability).
KernelAttnResult kernel_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                                  const torch::Tensor& s, const KernelAttnCache& cache, int64_t window, bool row_max,
                                  int64_t query_block = 256);

// DOT: coefficient vectors a_j per past token, M φ*(x) = Σ_j a_j κ(k_j, x). Step t (anchor a^0 = the
// coefficients at the chunk start): e_i = Σ_j a^0_j κ(k_j, k_i) - v_i; a ← α_t a;
// a_i ← a_i - η_t γ_i e^{-s} e_i for i ∈ [t-c+1, t]; y_t = Σ_j a_j κ(k_j, q_t).
struct DotState {
  torch::Tensor k, v, a, a0, g;  // [B,H,N,d], [B,H,N,dv], running / anchor coefficients [B,H,N,dv], γ [B,H,N]
  int64_t pos = 0;               // tokens consumed in the current chunk
};
struct DotResult {
  torch::Tensor y;  // [B, T, H, dv]
  DotState state;
};
// Token by token (reference; decode step).
DotResult dot_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                        const torch::Tensor& s, const DotState& st, int64_t window, int64_t chunk);
// Chunk-wise (docs/models.md#dla-swla-and-omeganet Omega coefficients): Y = diag(A) Y_prev - (C ⊙ K_qk) E per chunk.
DotResult dot_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                    const torch::Tensor& s, const DotState& st, int64_t window, int64_t chunk);

}  // namespace mnemo
