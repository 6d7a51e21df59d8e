// Checkpoints: DIR/checkpoint/{config.json, model.pt, optim.pt, trainer.json}. Written to a
// temporary folder and renamed, so a crash never leaves a half-written checkpoint.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>

#include "core/common.h"
#include "engine/backbone.h"
#include "runtime/model.h"

namespace mnemo {

struct TrainerState {
  int64_t step = 0;  // optimiser steps completed
  int64_t run_id = 0;
  std::string db_path;
  double best_test_accuracy = 0;
  json to_json() const;
  static TrainerState from_json(const json& j);
};

std::string checkpoint_dir(const std::string& out_dir);  // out_dir/checkpoint
bool has_checkpoint(const std::string& out_dir);

void save_checkpoint(const std::string& out_dir, const json& config, Backbone& model,
                     torch::optim::Optimizer* optimizer, const TrainerState& state);

// Accepts either the run's out dir or its checkpoint folder.
std::string resolve_checkpoint_path(const std::string& path);
json load_checkpoint_config(const std::string& path);
TrainerState load_trainer_state(const std::string& path);
// The backbone a resolved run config trains (tasks/mad_tasks.h task_backbone).
std::string backbone_kind(const json& resolved_config);
// Builds the backbone from the checkpoint's config and loads the weights (Error if incompatible),
// in eval mode on `device`.
Backbone load_backbone(const std::string& path, const torch::Device& device);
// The same for a language model (generation); Error for an autoencoder checkpoint.
LanguageModel load_model(const std::string& path, const torch::Device& device);
// Loads the weights of a checkpoint into an existing backbone (resume).
void load_weights(const std::string& path, Backbone& model);
void load_optimizer(const std::string& path, torch::optim::Optimizer& optimizer);

}  // namespace mnemo
