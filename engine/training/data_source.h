// Where training batches come from (the trainer's "data source" part): token-task examples or
// windows of a corpus token shard. A micro-batch is a pure function of (seed, step, micro), so a
// resumed run draws exactly the batches it would have drawn, with no loader state to save.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/lm_task.h"
#include "tasks/task.h"

namespace mnemo {

struct TrainBatch {
  torch::Tensor input_ids;  // [B, T] int64
  torch::Tensor labels;     // [B, T] int64, -100 where not scored
  int64_t tokens = 0;       // input tokens (throughput)
  int64_t labelled = 0;     // positions with a label (the loss's denominator)
  int64_t labelled_all_ranks = -1;  // data-parallel: labelled positions of the whole micro-batch, every rank's
                                    // share together (-1: this batch is the whole micro-batch)
  torch::Tensor sequence_starts;  // bool [B, T] on the CPU, true where a document starts (reset_state_at_bos);
                                  // undefined: each row is one sequence
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Micro-batch `micro` in [0, grad_accum) of optimiser step `step` (0-based): rows
  // (step * grad_accum + micro) * batch_size + j, j < batch_size, of the source's seeded order.
  virtual TrainBatch batch(int64_t step, int64_t micro) = 0;
  // Where the source stands after `steps` steps (recorded in the checkpoint; e.g. epoch, rows).
  virtual json position(int64_t steps) const = 0;
};

// Token task: `n_train` seeded examples cycled in seeded epoch permutations (n_train 0: fresh examples).
std::unique_ptr<DataSource> make_token_task_source(const TokenTask& task, int64_t n_train, int64_t batch_size,
                                                   int64_t grad_accum, uint64_t seed, const torch::Device& device);

// Corpus windows of seq_len + 1 tokens from `shard` (docs/tasks.md#language-modelling): `sampler` "random" (uniform
// start positions, seeded per row) or "sequential" (consecutive windows [kT, kT + T], epoch after epoch);
// packing off keeps every window inside one document (Error when no document has seq_len + 1 tokens);
// reset_at_bos marks each window's BOS tokens as sequence starts: the model reads every document from a fresh state
// (docs/models.md#packed-sequences).
struct CorpusWindows {
  int64_t seq_len = 0, batch_size = 1, grad_accum = 1;
  uint64_t seed = 0;
  std::string sampler = "random";
  bool packing = true, reset_at_bos = false;
  int64_t bos_id = -1;
};
std::unique_ptr<DataSource> make_corpus_source(const TokenShard& shard, const CorpusWindows& opt,
                                               const torch::Device& device);

// Data-parallel training: rank `rank` of `world` trains on its share of every micro-batch of `whole` — rows
// [rank·R/world, (rank+1)·R/world) of the micro-batch's R rows — so the ranks' shares are disjoint and together
// are exactly the batch one rank would draw (the same run on any number of ranks). Every rank draws the whole
// micro-batch (a pure function of seed, step, micro) and keeps its rows; R >= world is required.
std::unique_ptr<DataSource> make_rank_share(std::unique_ptr<DataSource> whole, int rank, int world);

}  // namespace mnemo
