// Softmax attention over explicit positions, shared by the Titans and ATLAS hybrids (MAC, MAG;
// docs/models.md#titans-mac, docs/models.md#titans-mag, docs/models.md#atlas-hybrids): q [B, H, Tq, d] at positions qpos [Tq], keys/values [B, H, Tk, d] at
// kpos [Tk] (ascending). A key is visible when kpos <= qpos and, with window > 0, kpos > qpos - window
// or kpos < always_before (the persistent/always-visible prefix). Queries run in blocks of q_block;
// computed in fp32 (fp64 for fp64 inputs), returned in q's dtype.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace mnemo {

torch::Tensor window_attention(const torch::Tensor& q, const torch::Tensor& qpos, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& kpos, int64_t window,
                               int64_t always_before, int64_t q_block);

// MAC's segment attention (docs/models.md#titans-mac): queries q [B, H, n, d] at segment positions so .. so+n-1 over
// [P | h | S] — the persistent keys pk/pv [B, H, N_p, d] (undefined: none) always visible, the memory read-outs
// hk/hv and the tokens xk/xv [B, H, so+n, d] of segment position j visible to query i iff j <= so + i. On the
// CPU it is the fused kernel over the keys interleaved per position (h_0, x_0, h_1, x_1, ...: each query's keys
// a prefix); elsewhere window_attention with explicit positions (RoPE is applied by the caller).
torch::Tensor segment_attention(const torch::Tensor& q, int64_t so, const torch::Tensor& pk, const torch::Tensor& pv,
                                const torch::Tensor& hk, const torch::Tensor& hv, const torch::Tensor& xk,
                                const torch::Tensor& xv, int64_t q_block);

}  // namespace mnemo
