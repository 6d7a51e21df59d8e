// Training loop: any registered TokenTask × any model family; metrics to the results DB,
// checkpoints (model + optimiser + step) to the out dir, progress lines, resume.
#pragma once
#include <string>

#include "core/common.h"
#include "core/defaults.h"

namespace mnemo {

struct TrainOptions {
  std::string db_path = kDefaultDbPath;
  std::string out_dir;     // empty = runs/<model>-<task>-<config hash>
  std::string device;      // overrides the config's "device" when set
  bool resume = false;     // continue from out_dir's checkpoint (same run id, no duplicate rows)
  std::string sweep;       // sweep name recorded with the run
  bool quiet = false;      // no progress lines
  int64_t stop_after = 0;  // > 0: checkpoint and stop after this many steps (status 'stopped'; --resume continues)
};

struct TrainResult {
  int64_t run_id = 0, steps = 0;
  double best_test_accuracy = 0, final_test_accuracy = 0, final_test_loss = 0, final_train_loss = 0;
  double tokens_per_s = 0, wall_s = 0;
  std::string out_dir;
};

// `user_config` is resolved (defaults merged, unknown keys rejected) before anything is written.
TrainResult train(const json& user_config, const TrainOptions& opt);

}  // namespace mnemo
