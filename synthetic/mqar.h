// MQAR generator (docs/tasks.md#mqar, Zoology semantics). Pure C++, no LibTorch.
#pragma once
#include <cstdint>
#include <vector>

#include "synthetic/example.h"

namespace mnemo {

struct MqarParams {
  int64_t vocab_size = 8192;
  int64_t seq_len = 64;
  int64_t num_kv_pairs = 4;
  double power_a = 0.01;
  int64_t num_passes = 1;
  bool random_non_queries = false;
};

void validate(const MqarParams& p);  // throws Error naming the violated constraint

// One example from its own seed: keys from [1, V/2), values from [V/2, V), query gaps drawn
// without replacement with p(g) ∝ a (g+1)^(a-1), label = value at the query-key position.
TokenExample mqar_example(const MqarParams& p, uint64_t example_seed);

// Per-example seeds: train in [0, 2^31), test in [2^31, 2^32) (disjoint by construction).
uint64_t example_seed(Split split, uint64_t base_seed, int64_t index);

}  // namespace mnemo
