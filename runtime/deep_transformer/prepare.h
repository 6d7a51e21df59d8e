// DT / SWDT / DOT kernel internals (see kernel_memory.h): the input check and layout helpers shared by the blocked
// attention of DT / SWDT (blocked_attention.cpp) and DOT's token-by-token (naive.cpp) and chunk (chunk.cpp) forms;
// defined in prepare.cpp.
#pragma once
#include <torch/torch.h>

namespace mnemo {
namespace deep_transformer_detail {

torch::Tensor bh(const torch::Tensor& x, torch::ScalarType dt);  // [B,T,H,*] -> [B,H,T,*] in dt
torch::Tensor cat_or(const torch::Tensor& a, const torch::Tensor& b);  // cat on the token axis (a undefined: b)

// Throws Error unless q, k [B,T,H,d], v [B,T,H,dv], gates [B,T,H], s [H], window >= 1.
void check(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
           const torch::Tensor& s, int64_t window);

// DOT's inputs in the recurrence dtype, [B, H, T, ·]; γ ≡ 1 when gamma is undefined; s as [1, H, 1, 1].
struct DotPrep {
  torch::Tensor Q, K, V, la, et, ga, s;
  torch::ScalarType dt;
};
DotPrep dot_prep(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& gamma, const torch::Tensor& s);

}  // namespace deep_transformer_detail
}  // namespace mnemo
