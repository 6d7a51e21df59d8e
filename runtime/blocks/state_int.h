// Integer scalars kept in a layer's decode state (e.g. the position inside the current chunk).
#pragma once
#include <string>

#include "runtime/mixer.h"

namespace mnemo {

// The value stored under `key`, 0 when there is no state or no such entry.
inline int64_t state_int(LayerState* state, const std::string& key) {
  if (!state || !state->has(key)) return 0;
  return state->at(key).item<int64_t>();
}

inline void set_state_int(LayerState* state, const std::string& key, int64_t value) {
  if (state) state->tensors[key] = torch::tensor(value, torch::kInt64);
}

}  // namespace mnemo
