// Value checks of a resolved run configuration: every bad value ends in one Error naming the key,
// the rule and the value (`lr=-1` used to reach LibTorch's "Invalid learning rate: -1", `mlp_ratio=0`
// "from is out of bounds for float", `eval_every=-5` was accepted).
#pragma once
#include "core/common.h"

namespace mnemo {

// Checks the training and skeleton keys of `resolved` (the output of resolve_run_config): integers
// where counts are meant, ranges (steps >= 1, lr > 0, 0 <= beta1 < 1, 0 <= warmup_frac <= 1, ...) and
// finite numbers everywhere. Throws Error("config key 'lr' must be > 0, got -1"); absent keys are skipped.
void validate_run_config(const json& resolved);

}  // namespace mnemo
