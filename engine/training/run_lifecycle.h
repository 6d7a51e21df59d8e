// The parts of a training run's life around the loop (engine/training/trainer.cpp): checks made before the
// run row exists, the one-line reason a failed run records, and which earlier row a resume adopts.
#pragma once
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "engine/io/checkpoint.h"
#include "engine/training/distributed.h"
#include "results/db.h"
#include "tasks/task.h"

namespace mnemo {

// Largest example set a run may hold in memory (n_train + n_test examples); above it the run is
// refused before it starts.
constexpr int64_t kMaxExampleBytes = int64_t{4} << 30;  // 4 GiB

// Creates out_dir and proves it writable (a probe file); Error naming the folder otherwise.
void check_out_dir_writable(const std::string& out_dir);

// Estimated bytes of n examples of `split` (from a small sample; this also checks that the task's
// data files are present).
double estimate_example_bytes(const TokenTask& task, Split split, int64_t n, uint64_t seed);
// Error with the estimate when n_train + n_test examples exceed kMaxExampleBytes.
void check_example_memory(const TokenTask& task, int64_t n_train, int64_t n_test, uint64_t seed);

// The message a failed run records: one line, no stack trace (LibTorch's backtrace dropped).
std::string error_line(const std::exception& e);

// Error when `run` is 'running' in another live process on this host (two processes must never
// train one run or write one folder).
void refuse_if_running_elsewhere(const ResultsDB& db, const RunInfo& run);
// `train --resume` without a checkpoint: an earlier row of this out_dir and config that never
// completed and whose process is gone (killed before its first checkpoint, failed, stopped) is
// restarted instead of creating a second row.
std::optional<RunInfo> adoptable_run(const ResultsDB& db, const std::string& out_dir, const std::string& config_hash);

// ---- the run record: which row of the database an invocation of train() writes, and from which step ----

struct RunRecord {
  TrainerState state;
  bool resuming = false;                 // from the checkpoint in out_dir
  std::optional<RunInfo> adopted;        // --resume without a checkpoint: this out_dir's unfinished row, from step 0
  bool completed_already = false;        // --resume of a completed run: nothing to do
  std::optional<RunInfo> completed_run;  // its row (rank 0)
};

// The newest complete checkpoint (one a crashed write left is put back in place, by rank 0); its config must be the
// same run. Every rank reads it (a job on several hosts needs out_dir on a shared file system).
void read_checkpoint(RunRecord& rec, const std::string& hash, bool resume, const std::string& out_dir,
                     Distributed* dist, bool main_rank, bool quiet);
// Rank 0: the checkpoint's row (which must be this run's), or with --resume and no checkpoint a row to adopt.
void find_run_row(RunRecord& rec, const ResultsDB& db, const std::string& hash, bool resume,
                  const std::string& db_path, const std::string& out_dir);
// Data-parallel: every rank resumes from the same step, or none does; a completed run ends every rank.
void agree_on_resume(RunRecord& rec, Distributed& dist, const DistEnv& env, const std::string& out_dir);

}  // namespace mnemo
