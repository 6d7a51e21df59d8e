// Batching of token examples: right padding with id 0, label -100 on padded positions.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "synthetic/example.h"

namespace mnemo {

struct TokenBatch {
  torch::Tensor input_ids;  // [B, T] int64 (right-padded with 0)
  torch::Tensor labels;     // [B, T] int64 (-100 where not scored or padded)
};

TokenBatch collate(const std::vector<const TokenExample*>& examples, const torch::Device& device);

}  // namespace mnemo
