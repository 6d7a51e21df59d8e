// Small pieces shared by the mixers (mostly the linear-recurrent ones): argument validation and the choice between the chunked and the O(1) recurrent kernel.
#pragma once
#include <cmath>
#include <string>

#include "runtime/mixer.h"

namespace mnemo {

// A mixer's `form` argument must be "chunk" or "recurrent".
inline void check_form(const std::string& family, const std::string& form) {
  if (form != "chunk" && form != "recurrent")
    throw Error(family + ": form must be \"chunk\" or \"recurrent\", got \"" + form + "\"");
}

// check_form, and chunk_size >= 1.
inline void check_kernel_form(const std::string& family, const std::string& form, int64_t chunk_size) {
  check_form(family, form);
  if (chunk_size < 1) throw Error(family + ": chunk_size must be >= 1, got " + std::to_string(chunk_size));
}

// Per-head size d_model · expand / n_heads; an error unless it is a positive integer.
inline int64_t expanded_head_dim(const std::string& family, const std::string& field, int64_t d_model,
                                 double expand, int64_t n_heads) {
  const double total = d_model * expand;
  const auto rounded = static_cast<int64_t>(std::llround(total));
  if (expand <= 0 || std::abs(total - rounded) > 1e-9 || rounded % n_heads != 0 || rounded == 0)
    throw Error(family + ": " + field + " = " + std::to_string(expand) + " gives d_model * " + field +
                " = " + std::to_string(total) + ", which must be a positive multiple of n_heads (" +
                std::to_string(n_heads) + ")");
  return rounded / n_heads;
}

// Per-head size d_model / n_heads; an error naming the family unless the heads divide d_model.
inline int64_t head_dim_of(const std::string& family, int64_t d_model, int64_t n_heads) {
  if (n_heads < 1 || d_model % n_heads != 0)
    throw Error(family + ": d_model " + std::to_string(d_model) + " is not divisible by " + std::to_string(n_heads) +
                " heads");
  return d_model / n_heads;
}

// The chunked kernel runs for form "chunk" except for a single decode step with a state, which
// uses the O(1) recurrent step.
inline bool use_chunked_kernel(const std::string& form, const LayerState* state, int64_t T) {
  return form == "chunk" && !(state != nullptr && T == 1);
}

// The tensor stored under `key` in the decode state, or an undefined tensor (= initial state).
inline torch::Tensor state_or_empty(const LayerState* state, const std::string& key) {
  if (state == nullptr) return {};
  auto it = state->tensors.find(key);
  return it == state->tensors.end() ? torch::Tensor() : it->second;
}

}  // namespace mnemo
