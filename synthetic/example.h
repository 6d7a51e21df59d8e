// What every generator produces: one token-level example (input ids + per-position labels) of a
// train or test split. Tasks (tasks/task.h) and the trainer consume these.
#pragma once
#include <cstdint>
#include <vector>

#include "core/common.h"

namespace mnemo {

enum class Split { train, test };
const char* split_name(Split s);

// labels[i] is the target for the prediction made at input position i, -100 where not scored
// (Zoology/HF convention).
struct TokenExample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
  json meta;  // optional per-example metadata (e.g. task variant)
};

constexpr int64_t kIgnoreLabel = -100;

}  // namespace mnemo
