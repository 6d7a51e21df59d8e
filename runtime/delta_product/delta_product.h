// Gated DeltaProduct kernels (docs/models.md#gated-deltaproduct; Siems et al., arXiv 2502.10297 §3; fixture op
// `gated_delta_product`): n_h delta-rule (generalised Householder) steps per token, the decay applied once per token.
// Row-vector convention, state S [B, H, K, V], read after the token's last step:
//   S ← exp(g_t) S                                            (g ≡ 0, i.e. undefined, without the forget gate)
//   for j = 1..n_h:  S ← S + k_{t,j}^T beta_{t,j} (v_{t,j} − k_{t,j} S)
//   o_t = (scale q_t) S
// Layout: q [B, T, H, K]; k [B, T·n_h, H, K], v [B, T·n_h, H, V], beta [B, T·n_h, H] with token t's steps at rows
// t·n_h … t·n_h + n_h − 1 (flash-linear-attention's layout); g [B, T, H]. With n_h = 1 this is Gated DeltaNet.
#pragma once
#include <torch/torch.h>

#include "runtime/delta_rule/delta_rule.h"

namespace mnemo {

// Token-by-token recurrence (an outer loop over tokens, an inner one over the n_h steps); T == 1 is the O(1) decode
// step. g and initial_state may be undefined.
DeltaRuleResult gated_delta_product_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& beta, const torch::Tensor& g,
                                              const torch::Tensor& initial_state, double scale, int64_t num_householder);

// Chunked form: the n_h steps of every token become n_h rows of one delta-rule sequence of length T·n_h, with the
// token's decay on its first row, its query on its last row (zero queries elsewhere), run by the chunked delta rule
// (runtime/delta_rule/chunk.cpp, chunks of `chunk_size` rows); the outputs of the last rows are the tokens' outputs.
DeltaRuleResult gated_delta_product_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& beta, const torch::Tensor& g,
                                          const torch::Tensor& initial_state, double scale, int64_t num_householder,
                                          int64_t chunk_size);

// The same rows on the delta rule's fused chunk kernels (delta_rule_chunk_fused: the CUDA kernels on CUDA tensors,
// their block code over the host grid on CPU tensors). `cu_seqlens` (int32/int64 [N + 1] token bounds, B = 1) packs N
// sequences, each from its own state (initial_state [N, H, K, V] or zeros): row bounds are the token bounds × n_h.
DeltaRuleResult gated_delta_product_chunk_fused(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, const torch::Tensor& beta,
                                                const torch::Tensor& g, const torch::Tensor& initial_state,
                                                double scale, int64_t num_householder, int64_t chunk_size,
                                                const torch::Tensor& cu_seqlens = {});

// Shape checks shared by both forms; throw mnemo::Error naming the tensor and its shape.
void check_delta_product_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& initial_state,
                                int64_t num_householder);

}  // namespace mnemo
