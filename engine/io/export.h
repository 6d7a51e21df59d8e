// `mnemo export --format safetensors`: a checkpoint's weights as PATH.safetensors + PATH.json, and back.
//
// PATH.safetensors holds every tensor of the backbone module under the name LibTorch gives it (the names
// torch::save writes into model.pt): named_parameters() then named_buffers(), in the checkpoint's dtype;
// __metadata__ = {"format": "mnemo-safetensors-1", "backbone": kind, "model": family}. For a language model:
//   embed.weight                         [V, d]      token embedding (also the LM head when tied)
//   block{i}.mixer_norm.weight           [d]         pre-mixer RMSNorm of block i (i = 0 .. n_layers-1)
//   block{i}.mixer.<...>                 the mixer's own parameters, e.g. transformer: q_proj.weight,
//                                        k_proj.weight, v_proj.weight, o_proj.weight ([out, in], as nn::Linear)
//   block{i}.mlp_norm.weight             [d]         pre-MLP RMSNorm
//   block{i}.mlp.{gate,up,down}.weight   SwiGLU: down(silu(gate x) * up x)
//   final_norm.weight                    [d]
//   lm_head.weight                       [V, d]      only with tie_embeddings = false
// (An autoencoder backbone, MAD compression, has its own module names; they are exported the same way.)
// PATH.json = the checkpoint's config.json + {"format": "mnemo-safetensors-1", "mnemo_model": model.json}
// (backbone kind, vocab_size, layer mixers: what load_backbone reads from model.json).
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

// Every tensor of the backbone's state with its name (parameters, then buffers).
std::vector<std::pair<std::string, torch::Tensor>> backbone_state(const Backbone& model);

// Default PATH for `export`: DIR/export/model (DIR's parent when DIR is itself a checkpoint folder, which
// the next checkpoint write would replace).
std::string default_export_path(const std::string& checkpoint);

struct ExportResult {
  std::string safetensors_path, json_path;
  int64_t tensors = 0, bytes = 0;
};
// `format` must be "safetensors"; `out_path` without extension ("" = default_export_path).
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& format, const std::string& out_path);

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
