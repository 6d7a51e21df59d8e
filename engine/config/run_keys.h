// The training and model-skeleton keys of a run configuration in one typed table (the task's parameters and the
// mixers' arguments live on their registrations: tasks/task.h, runtime/registry.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// A numeric key's valid values: [lo, hi] with open ends where flagged; integer: whole numbers only.
struct KeyRange {
  bool integer = false;
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  std::string describe() const;  // as a user reads it: ">= 1", "> 0", "in [0, 1)"
};

// One training or model-skeleton key. This table is the one source of their defaults (a default is also the key's
// type), valid ranges (engine/config/config_checks.cpp), meanings (`mnemo train --help`, `mnemo keys`, the key
// reference of docs/configuration.md) and whether it enters the config hash (config_hash).
struct RunKey {
  enum class Group { training, skeleton };
  std::string name;
  json default_value;
  std::string help;
  Group group = Group::training;
  std::optional<KeyRange> range;
  bool hashed = true;  // false: how a run is run or watched (device, cadence), not what it computes
};
const std::vector<RunKey>& run_keys();
const RunKey* find_run_key(const std::string& name);  // nullptr for a task or mixer key

// Views of run_keys(): training keys with defaults (lr, weight_decay, steps, batch_size, seed, eval_every, ...).
const json& training_defaults();
// Model-skeleton keys with defaults (d_model, n_layers, n_heads, mlp_ratio, ...).
const json& skeleton_defaults();
// key -> one-line description for every training and skeleton key (`mnemo train --help`).
const json& config_key_help();

}  // namespace mnemo
