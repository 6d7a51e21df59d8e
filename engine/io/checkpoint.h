// Checkpoints: DIR/checkpoint/{config.json, model.json, model.pt, optim.pt, trainer.json}.
// A write goes to DIR/checkpoint.tmp (every file fsynced, trainer.json last: a folder whose
// trainer.json parses is complete), then checkpoint -> checkpoint.old, checkpoint.tmp -> checkpoint,
// the folder fsynced, checkpoint.old removed. A crash at any point leaves at least one complete
// checkpoint among checkpoint, checkpoint.tmp and checkpoint.old; readers take the newest complete
// one and recover_checkpoint() puts it back in place.
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <string>

#include "core/common.h"
#include "runtime/backbone.h"
#include "runtime/model.h"

namespace mnemo {

struct TrainerState {
  int64_t step = 0;  // optimiser steps completed
  int64_t run_id = 0;
  std::string db_path;
  double best_test_accuracy = 0;
  // Totals of every invocation up to this checkpoint (cumulative summaries across resumes).
  double wall_s = 0;          // wall-clock seconds
  double train_s = 0;         // seconds inside optimiser steps
  int64_t train_tokens = 0;   // tokens trained on
  std::string primary_metric;     // e.g. "accuracy" (token tasks), "ppl" (language modelling)
  double best_primary = NAN;      // best held-out value of it so far
  json data_position;             // the data source's position (DataSource::position), for the record
  json to_json() const;
  static TrainerState from_json(const json& j);
};

std::string checkpoint_dir(const std::string& out_dir);  // out_dir/checkpoint
// A complete checkpoint in out_dir (checkpoint, or one a crashed write left in checkpoint.tmp/.old).
bool has_checkpoint(const std::string& out_dir);
// The newest complete checkpoint folder under out_dir, or "" if none (read-only).
std::string newest_complete_checkpoint(const std::string& out_dir);
// Makes out_dir/checkpoint the newest complete checkpoint (renaming a complete checkpoint.tmp or
// checkpoint.old left by a crash into place) and removes the leftovers. Returns a one-line note of
// what it recovered, or "" when there was nothing to do.
std::string recover_checkpoint(const std::string& out_dir);

void save_checkpoint(const std::string& out_dir, const json& config, Backbone& model,
                     torch::optim::Optimizer* optimizer, const TrainerState& state);

// Accepts either the run's out dir or its checkpoint folder.
std::string resolve_checkpoint_path(const std::string& path);

// A model to evaluate may also be a safetensors export (engine/io/export.h): PATH.safetensors (PATH.json beside
// it), PATH.json, a folder holding model.safetensors + model.json (RUN/export), or a run folder with no
// checkpoint but an export/ folder. A checkpoint always wins over an export. And it may be a Hugging Face model
// folder of an fla model (config.json + model.safetensors, engine/io/fla_import.h), read in memory as mnemo's model
// of the same function.
struct ExportFiles {
  std::string safetensors, config_json;
};
std::optional<ExportFiles> find_export(const std::string& path);
// The checkpoint folder, the export's .safetensors file, or the Hugging Face folder (what an evals row records as
// `checkpoint`).
std::string resolve_model_path(const std::string& path);
// config.json of a checkpoint, or the run config of an export (its PATH.json without the export's own keys).
json load_checkpoint_config(const std::string& path);
TrainerState load_trainer_state(const std::string& path);
// model.json: what the checkpoint's model was (written by save_checkpoint; every field optional, older
// checkpoints have none). Read with types and ranges checked: an Error names the file and the field.
struct CheckpointModelMeta {
  std::optional<int64_t> vocab_size;  // 1 .. kMaxVocabSize
  std::optional<std::string> backbone;
  std::optional<std::vector<std::string>> layer_mixers;
};
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
CheckpointModelMeta parse_model_meta(const json& meta, const std::string& file);
// DIR/model.json parsed (all fields empty when the file does not exist).
CheckpointModelMeta read_model_meta(const std::string& checkpoint_dir);
// Builds the backbone from the checkpoint's (or export's) config and loads the weights (Error if
// incompatible), in eval mode on `device`.
Backbone load_backbone(const std::string& path, const torch::Device& device);
// The same for a language model (generation); Error for an autoencoder checkpoint.
LanguageModel load_model(const std::string& path, const torch::Device& device);
// Error (naming the checkpoint, the key and both values) unless the checkpoint's model.json
// describes `model`: backbone kind, vocab_size, layer mixers.
void check_checkpoint_model(const std::string& path, const Backbone& model);
// Loads the weights of a checkpoint into an existing backbone (resume); Error naming the first
// parameter whose shape or dtype differs.
void load_weights(const std::string& path, Backbone& model);
void load_optimizer(const std::string& path, torch::optim::Optimizer& optimizer);

}  // namespace mnemo
