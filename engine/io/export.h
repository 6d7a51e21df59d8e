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
#include "engine/io/model_files.h"
#include "runtime/backbone.h"

namespace mnemo {

// Default PATH for `export`: DIR/export/model (DIR's parent when DIR is itself a checkpoint folder, which
// the next checkpoint write would replace).
std::string default_export_path(const std::string& checkpoint);

struct ExportResult {
  std::string safetensors_path, json_path;
  int64_t tensors = 0, bytes = 0;
};
// `format` must be "safetensors"; `out_path` without extension ("" = default_export_path).
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& format, const std::string& out_path);

}  // namespace mnemo
