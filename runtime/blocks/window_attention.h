// Softmax attention over explicit positions, shared by the Titans and ATLAS hybrids (MAC, MAG; spec
// models.md §5.6-5.7, §7.9): q [B, H, Tq, d] at positions qpos [Tq], keys/values [B, H, Tk, d] at
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

}  // namespace mnemo
