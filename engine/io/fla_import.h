// A flash-linear-attention (fla-org/flash-linear-attention) causal LM saved by Hugging Face (config.json +
// model.safetensors, or sharded with model.safetensors.index.json) read into mnemo's model of the same function:
// `mnemo eval/generate/export --checkpoint DIR` take such a folder directly, and `mnemo import-fla`
// (engine/io/fla_checkpoint.h) saves it as a mnemo checkpoint. Only families whose fla wiring mnemo computes exactly are imported; every other
// configuration is refused with an Error naming the fla field and the difference. The parts every fla model shares
// are here; each family's own (its config fields, refusals and parameter names) is on its registration
// (FamilyTraits::fla, runtime/<family>/fla_names.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/backbone.h"
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

// Where fla's causal LM keeps its base model: "model." ("backbone." for Mamba2).
std::string fla_model_prefix(const FlaModel& m);
// mnemo parameter name -> source, for a model built from `m`; `prefix` is fla_model_prefix(m) (or "" for a bare
// base model).
std::map<std::string, FlaSource> fla_key_map(const FlaModel& m, const std::string& prefix);

// A Hugging Face model folder: a directory with config.json (holding "model_type") and model.safetensors or
// model.safetensors.index.json, and neither a mnemo checkpoint's model.pt nor an export's model.json.
bool is_hf_model_folder(const std::string& path);

// The resolved mnemo run config of `m` for `task` (its defaults; vocab_size from fla when the task has one), with
// `overrides` (run-config keys: task parameters, training keys) on top. Overriding a key derived from the fla config
// is an Error naming `where`.
json fla_run_config(const FlaModel& m, const std::string& task, const json& overrides, const std::string& where);

struct FlaLoadedModel {
  FlaModel fla;
  json resolved;      // the run config (fla_run_config)
  Backbone backbone;  // weights loaded, fp32, on the CPU, in training mode
  std::string source; // the weights file (or the shard index)
  int64_t tensors = 0, parameters = 0;
};
// Reads DIR/config.json and DIR's safetensors (model.safetensors, or the shards model.safetensors.index.json names)
// into mnemo's model of the same function. Every fla tensor must have a place and every mnemo parameter a source:
// an Error names the file, the key and the shapes otherwise.
FlaLoadedModel load_fla_model(const std::string& model_dir, const std::string& task, const json& overrides);

// What `mnemo eval --checkpoint DIR` reads from a Hugging Face folder: the run config of task lm with DIR's
// tokenizer (tokenizer.json, else tokenizer.model; none when DIR has neither) and its max_position_embeddings as
// seq_len (2048 when absent); and the model, weights loaded, in eval mode on `device`.
json fla_folder_run_config(const std::string& model_dir);
Backbone load_fla_folder(const std::string& model_dir, const torch::Device& device);

}  // namespace mnemo
