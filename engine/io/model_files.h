// A model's tensors by name, and reading them back: model.pt as stored, an export's PATH.safetensors + PATH.json
// (the format: engine/io/export.h). Checkpoints (engine/io/checkpoint.h) and exports (engine/io/export.h) both
// build on this file; neither includes the other's.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "runtime/backbone.h"

namespace mnemo {

inline constexpr const char* kSafetensorsExportFormat = "mnemo-safetensors-1";

// The backbone a resolved run config trains (tasks/mad_tasks.h task_backbone).
std::string backbone_kind(const json& resolved_config);

// Every tensor of the backbone's state with its name (parameters, then buffers).
std::vector<std::pair<std::string, torch::Tensor>> backbone_state(const Backbone& model);

// The tensors of a model.pt exactly as stored (dtype included), named and ordered as `model`'s state
// (backbone_state); Error naming the file and the tensor when one is missing or its shape differs.
std::vector<std::pair<std::string, torch::Tensor>> stored_state(const std::string& file, const Backbone& model);

// Loads `tensors` into `model` (LibTorch's load semantics: each tensor takes the stored dtype). A parameter or
// buffer absent from `tensors`, a tensor with no place in the model, or a shape mismatch is an Error naming the
// key and `source`.
void load_backbone_state(Backbone& model, const std::map<std::string, torch::Tensor>& tensors,
                         const std::string& source);

// An export's PATH.json split into the run config (config.json as trained) and its mnemo_model record; Error
// unless "format" is kSafetensorsExportFormat.
std::pair<json, json> export_run_config(const std::string& config_json_path);

// The backbone an export describes, weights loaded, in eval mode on `device`. `mnemo eval` and `generate`
// take an export wherever they take a checkpoint (engine/io/checkpoint.h find_export).
Backbone load_backbone_safetensors(const std::string& safetensors_path, const std::string& config_json_path,
                                   const torch::Device& device);

}  // namespace mnemo
