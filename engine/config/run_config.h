// Run configuration: one flat JSON object holding training keys, model-skeleton keys, the
// task's parameters and the mixer families' arguments. Resolution merges every default and
// rejects unknown keys and wrongly typed values with a message naming the key.
#pragma once
#include <string>
#include <vector>

#include "core/common.h"
#include "core/config_values.h"
#include "engine/config/run_keys.h"
#include "runtime/model.h"

namespace mnemo {

// Resolve a user config: requires "model" and "task"; unknown key -> Error naming it and the
// keys that are valid for this model and task.
json resolve_run_config(const json& user);

// The model part of resolution, shared by runs and `mnemo bench`: writes the user's keys into `cfg` (which holds
// the defaults: skeleton, `mixer_keys.defaults`, and any other accepted keys). A key neither in `cfg` nor in
// `mixer_keys.without_default` -> "<prefix>unknown <label> '<key>' <context>; valid keys: ..."; a value of the wrong
// type -> "<prefix><label> '<key>' expects a ...". A mixer key given both flat and in a `layers` entry is an error
// (give it once: flat for every layer whose mixer declares it, or per layer).
struct KeyMessages {
  std::string prefix;   // e.g. "bench: "
  std::string label;    // "config key" or "--set key"
  std::string context;  // e.g. "for model 'samba' and task 'mqar'"
};
void apply_user_keys(json& cfg, const MixerKeys& mixer_keys, const json& user, const KeyMessages& msg);

// Split a resolved config into the task's parameters (keys the task declares).
json task_params_of(const json& resolved);

// What a run computes, as a short name: SHA-256 (first 16 hex digits) of kConfigHashVersion and the keys of the
// resolved config whose values differ from the defaults of its model and task (resolve_run_config of model and task
// alone), without the keys that only say how a run is run or watched (RunKey::hashed false: device, cadence). A key
// added with a default therefore leaves every earlier hash as it was. Sweeps skip cells whose hash has a completed
// run; resume and adoption match runs by it.
std::string config_hash(const json& resolved);

// The version of config_hash's rule. A change to the rule or to a default that alters what a run computes raises
// it; a results database written under an older version has its runs' hashes recomputed from their stored
// configurations on opening (rehash_runs_if_old), so that old runs still resume and sweeps still skip them.
constexpr int kConfigHashVersion = 2;

class ResultsDB;
// Recomputes config_hash for every run of `db` stored under an older kConfigHashVersion, in one transaction, and
// records the version (no-op when current or read-only). A run whose stored configuration no longer resolves (a key
// since removed) keeps its old hash: it can no longer be resumed or matched, as before the change.
void rehash_runs_if_old(ResultsDB& db);

}  // namespace mnemo
