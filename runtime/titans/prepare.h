// Titans LMM kernel internals (docs/models.md#titans): the input checks and the prepared (cast) inputs and state
// that the token-by-token form (naive.cpp) and the chunk-wise dual form (chunk.cpp) both start from.
#pragma once
#include <torch/torch.h>

#include "runtime/titans/titans.h"

namespace mnemo {
namespace titans_detail {

// Throws Error naming the first input whose shape (or option) is wrong.
void check_inputs(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& log_keep, const torch::Tensor& log_eta, const torch::Tensor& theta,
                  const TitansMemoryState& init, int64_t chunk_size, double inner_grad_clip);

MemoryWeights cast_all(const MemoryWeights& w, torch::ScalarType dt);

// [B, T, H, ...] -> [B, H, T, ...] slice of tokens [a, a+n)
torch::Tensor bh(const torch::Tensor& x, int64_t a, int64_t n);

// The inputs and the state in the recurrence dtype (momentum zero-filled when log_eta is given and the state has none).
struct Prepared {
  torch::ScalarType dt;
  torch::Tensor q, k, v, lk, le, th;
  MemoryWeights w, s, anchor;
};

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                 const torch::Tensor& log_keep, const torch::Tensor& log_eta, const torch::Tensor& theta,
                 const TitansMemoryState& init);

}  // namespace titans_detail
}  // namespace mnemo
