// PaTH attention kernels (docs/models.md#path-attention; Yang et al., "PaTH Attention: Position Encoding via
// Accumulating Householder Transformations", arXiv 2505.16381 §3; fixture op `path_attn`): softmax attention whose
// query-key bilinear form carries the product of the Householder-like transforms H_s = I − β_s w_s w_sᵀ of every
// position after the key up to and including the query, and optionally FoX's forget gate (PaTH-FoX, §3.4):
//   s_ij = scale · ( q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j + c_i − c_j ),   j <= i (j = i: q_iᵀ k_i, no transform)
//   o_i  = Σ_{j<=i} softmax_j(s_ij) v_j,        c_t = Σ_{s<=t} log f_s (0 without the gate)
// The scale multiplies the gate term too (as flash-linear-attention's PaTH kernels and decoding do).
// Decode form: the cache holds every key transformed through the last position, k_j ← H_t k_j for all j < t at each
// new token t, then k_t is appended untransformed; the logits are q_t · (cached keys) — O(T) per step, a KV cache.
// Chunked form (chunk of n positions, W [n, D] rows w_t, b = β): with L = strict_lower(diag(b) W Wᵀ) and
// A = (I + L)⁻¹ (a unit lower-triangular solve, the UT transform),
//   Y = A diag(b) W        H_0 ⋯ H_m = I − Σ_{s<=m} y_s w_sᵀ       (products from the chunk start)
//   α = A strict_lower(diag(b) W Kᵀ)     H_i ⋯ H_{j+1} k_j = k_j − Σ_{j<t<=i} α_tj w_t     (products to row i)
// so the intra-chunk logits are q·kᵀ − tril(Q Wᵀ) α, the queries seen from the chunk start are Q − tril(Q Wᵀ) Y,
// the chunk's own keys moved to the chunk end are K − αᵀ W and the earlier keys move across the chunk as
// K_prev ← K_prev (I − Yᵀ W) (a D×D product when D < 2n, else the rank-n update). The chunked form runs query
// chunks in order with that moving key cache: O(T² D) like attention, no sequential step inside a chunk.
// Layout [B, T, HQ, D] (q), [B, T, H, D] (k, w), [B, T, H, Dv] (v), [B, T, H] (β), [B, T, HQ] (c); HQ a multiple of
// H (grouped queries: query head h uses key head h / (HQ / H)). w is used as given (the layer l2-normalises it).
// Computation in fp32 (fp64 stays fp64); both forms are plain autograd ops. The Tq queries sit at the last Tq of the
// Tk key positions: the first Tk − Tq keys form a cache already transformed through position Tk − Tq − 1 (their
// w and β are spent), w and β cover the Tq new positions only.
#pragma once
#include <torch/torch.h>

namespace mnemo {

struct PathAttnResult {
  torch::Tensor o;     // [B, Tq, HQ, Dv] in v's dtype
  torch::Tensor keys;  // [B, Tk, H, D]: every key transformed through the last position (the decode cache), k's dtype
};

// Chunked form: query chunks of `chunk_size` positions (memory O(chunk · Tk) per head without autograd).
// c_q [B, Tq, HQ] and c_k [B, Tk, HQ] are the cumulative log forget gates at the queries' and the keys' positions,
// both undefined for no gate.
PathAttnResult path_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                              const torch::Tensor& c_k, double scale, int64_t chunk_size);

// Token-by-token form (the reference and the decode step), same arguments.
PathAttnResult path_attention_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                        const torch::Tensor& c_k, double scale);

// Both forms' inputs in the compute dtype `dt`, heads first: Q [B, H, G, Tq, D] (query head h·G + g), K [B, H, Tk, D],
// V [B, H, Tk, Dv], W [B, H, Tq, D], Bt (β) [B, H, Tq], and with the gate Cq [B, H, G, Tq], Ck [B, H, G, Tk] (else
// undefined); `offset` = Tk − Tq keys come from the cache.
struct PathAttnHeads {
  torch::Tensor Q, K, V, W, Bt, Cq, Ck;
  int64_t B, Tq, HQ, D, H, G, Tk, Dv, offset;
};
PathAttnHeads path_attention_heads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                   const torch::Tensor& c_k, torch::ScalarType dt);

// Shape checks; throw mnemo::Error naming the tensor.
void check_path_attention_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& w, const torch::Tensor& beta, const torch::Tensor& c_q,
                                 const torch::Tensor& c_k);

}  // namespace mnemo
