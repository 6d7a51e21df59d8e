// Training loop: any registered TokenTask or the `lm` corpus task × any model family, read top to
// bottom from named parts: data source (engine/training/data_source.h), objective (engine/training/objective.h),
// optimiser + schedule (engine/training/optim.h), gradient accumulation, periodic evaluation, checkpoint /
// resume (engine/io/checkpoint.h), progress. Metrics go to the results DB.
#pragma once
#include <cmath>
#include <string>

#include "core/common.h"
#include "core/defaults.h"
#include "engine/training/distributed.h"

namespace mnemo {

struct TrainOptions {
  std::string db_path = kDefaultDbPath;
  std::string out_dir;     // empty = runs/<model>-<task>-<config hash>
  std::string device;      // overrides the config's "device" when set
  bool resume = false;     // continue from out_dir's checkpoint (same run id, no duplicate rows);
                           // a completed run is left as it is (TrainResult::already_completed)
  std::string sweep;       // sweep name recorded with the run
  bool quiet = false;      // no progress lines
  int64_t stop_after = 0;  // > 0: checkpoint and stop after this many steps (status 'stopped'; --resume continues)
  // Data-parallel training (engine/training/distributed.h): this process's rank in the job; a world of one by default.
  // batch_size is the whole micro-batch, shared by the ranks; only rank 0 writes the database, the checkpoints and
  // the progress lines. A collective that does not complete within dist_timeout ends every rank with an Error.
  DistEnv dist;
  std::chrono::milliseconds dist_timeout{std::chrono::minutes(30)};
  int64_t dist_bucket_bytes = 25 << 20;  // gradient buckets (DDP's bucket_cap_mb = 25)
  bool dist_overlap = true;              // all-reduce each bucket during the backward (Distributed::attach_gradients)
};

// Test figures are NaN when the run has no test set (n_test 0). tokens_per_s and wall_s add up
// every invocation of the run (resumes included).
struct TrainResult {
  int64_t run_id = 0, steps = 0;  // run_id 0: stopped by a signal before the run was recorded
  double best_test_accuracy = 0, final_test_accuracy = 0, final_test_loss = 0, final_train_loss = 0;
  double tokens_per_s = 0, wall_s = 0;
  std::string primary_metric;                    // e.g. "accuracy", "ppl" (config key primary_metric)
  double best_primary = NAN, final_primary = NAN;  // held-out values of it (NaN without an evaluation)
  json final_eval = json::object();              // the last held-out metrics: name -> value
  std::string out_dir;
  bool already_completed = false;  // --resume of a completed run: nothing was done or written
  bool stopped = false;            // status 'stopped' (--stop-after or a signal): --resume continues
  int stop_signal = 0;             // SIGINT / SIGTERM that stopped it (core/signals.h), else 0
  int world_size = 1, rank = 0;    // data-parallel: the job's ranks and this process's
  std::string dist_backend;        // data-parallel: "gloo" | "nccl"; empty = not a job
  double allreduce_s_per_step = 0;  // data-parallel: mean seconds per step waiting for the gradient all-reduce
                                    // after the backward (the part the backward did not hide)
  double buckets_in_backward_per_step = 0;  // data-parallel: gradient buckets launched during the backward
};

// `user_config` is resolved (defaults merged, unknown keys rejected) and the run validated (output
// folder writable, task data present, example sets within kMaxExampleBytes) before the run row is
// created; an error after that marks the row 'failed' with a one-line reason. Between steps the
// loop polls core/signals.h stop_requested(): it checkpoints and returns with stop_signal set.
TrainResult train(const json& user_config, const TrainOptions& opt);

}  // namespace mnemo
