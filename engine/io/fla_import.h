// `mnemo import-fla`: a flash-linear-attention (fla-org/flash-linear-attention) causal LM saved by Hugging Face
// (config.json + model.safetensors, or sharded with model.safetensors.index.json) as a mnemo checkpoint folder that
// `mnemo eval --checkpoint` loads. Only families whose fla wiring mnemo computes exactly are imported; every other
// configuration is refused with an Error naming the fla field and the difference. The parts every fla model shares
// are here; each family's own (its config fields, refusals and parameter names) is on its registration
// (FamilyTraits::fla, runtime/<family>/fla_names.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/fla_names.h"

namespace mnemo {

// The fla commit the wiring was compared against.
inline constexpr const char* kFlaCheckedCommit = "fla-org/flash-linear-attention@bc3b101dcb71";

struct FlaModel {
  std::string fla_model_type;  // config.json "model_type"
  std::string family;          // the mnemo model family
  int64_t vocab_size = 0;
  json model_keys;             // mnemo config keys: skeleton (d_model, n_layers, ...) and mixer arguments
  json fla_config;             // config.json over fla's defaults for its model_type
};

// Error (one line: the field, its value, the concrete difference) unless mnemo computes this fla model exactly.
// `where` names the file in messages.
FlaModel fla_config_to_mnemo(const json& config, const std::string& where);

// mnemo parameter name -> source, for a model built from `m`; `prefix` is "model." (or "" for a bare base model).
std::map<std::string, FlaSource> fla_key_map(const FlaModel& m, const std::string& prefix);

struct FlaImportResult {
  std::string family, checkpoint_dir;
  int64_t tensors = 0, parameters = 0;
  json config;  // the resolved mnemo run config written to the checkpoint
};
// Reads DIR/config.json and DIR's safetensors, writes out_dir/checkpoint (Error if out_dir already has one) and
// out_dir/imported_from.json. `task` and `overrides` (run-config keys: task parameters, training keys) complete the
// run config; overriding a key derived from the fla config is an Error.
FlaImportResult import_fla(const std::string& model_dir, const std::string& out_dir, const std::string& task,
                           const json& overrides);

}  // namespace mnemo
