// The five target sequence functions of the Atlas learnability experiments (docs/tasks.md#learnability):
// a sequence of pairs (i_j, o_j) in R^d that an online learner must fit position by position.
#pragma once
#include <torch/torch.h>

#include <string>

#include "core/common.h"

namespace mnemo {

struct LearnabilityTargetParams {
  int setting = 1;         // 1..5
  int64_t d = 256;         // paper: d = 256
  int64_t seq_len = 4096;  // t [decision]: > window so that setting 5 differs from 3
  int64_t rank = 16;       // setting 1: k [decision]
  int64_t window = 512;    // setting 5: SWA window (paper: 512), keys j - window + 1 .. j
};

void validate(const LearnabilityTargetParams& p);  // Error naming the bad field and value
std::string learnability_setting_name(int setting);  // "low-rank mapping", ...

struct LearnabilitySequence {
  torch::Tensor inputs;   // [T, d]: i_j (settings 1, 2, 3, 5) or o'_j (setting 4)
  torch::Tensor targets;  // [T, d]: o_j
};

// All randomness from `seed` (a private generator; the global torch seed is untouched):
//  i_j ~ N(0, I_d);  W_Q, W_K, W_V entries N(0, 1/d);  M*(x) = W_2 GELU(W_1 x), W entries
//  N(0, 1/fan_in), hidden width d, no biases.
//  1: o_j = W^T i_j, W = X Y, X ~ N(0, 1/d) [d x k], Y ~ N(0, 1/k) [k x d]
//  2: o_j = M*(i_j)
//  3: o'_j = causal softmax attention (temperature 1/sqrt(d)) of q = W_Q^T i, k = W_K^T i,
//     v = W_V^T i over positions <= j; o_j = M*(o'_j); input i_j
//  4: as 3 with input o'_j
//  5: as 3 with sliding-window attention (window keys)
LearnabilitySequence learnability_sequence(const LearnabilityTargetParams& p, uint64_t seed,
                                           torch::Dtype dtype = torch::kFloat32);

// Causal softmax attention over rows of q, k, v [T, d] with scores q.k / sqrt(d); window > 0
// keeps keys j - window + 1 .. j. Computed in row blocks (memory O(block * T)).
torch::Tensor causal_softmax_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t window = 0);

}  // namespace mnemo
