// What a run optimises and how it is judged on held-out data (the trainer's "objective" part):
// token tasks — cross-entropy on labelled positions, test loss / accuracy / the task's own metrics;
// language modelling — next-token cross-entropy, validation loss / perplexity / bits per byte over
// non-overlapping windows of the training context (docs/tasks.md#language-modelling).
#pragma once
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "runtime/backbone.h"
#include "tasks/lm_task.h"
#include "tasks/task.h"

namespace mnemo {

using Metrics = std::vector<std::pair<std::string, double>>;

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string eval_split() const = 0;  // metrics split of the held-out evaluation: "test" | "val"
  virtual bool has_eval() const = 0;           // false: no held-out rows at all (n_test 0)
  virtual std::string default_primary() const = 0;
  virtual Metrics evaluate(Backbone& model) = 0;           // in eval mode, no gradients
  virtual Metrics train_metrics(double loss) const = 0;    // logged beside the training loss
};

// true for accuracies (accuracy, accuracy_macro, ...), false for loss, ppl, bpb.
bool higher_is_better(const std::string& metric);

std::unique_ptr<Objective> make_token_objective(const TokenTask& task, int64_t n_test, uint64_t seed,
                                                int64_t eval_batch_size, const torch::Device& device);
// `val_tokens` 0 = the whole validation shard.
std::unique_ptr<Objective> make_lm_objective(const LmData& data, int64_t seq_len, int64_t val_tokens,
                                             int64_t eval_batch_size, const torch::Device& device);

}  // namespace mnemo
