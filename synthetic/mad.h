// MAD synthetic suite (docs/tasks.md#mad; external: athms/mad-lab mad/data/instances.py,
// mad/configs.py, configs/tasks/*.yml). Pure C++, no LibTorch: six instance generators with
// mad-lab's parameters and baselines and the difficulty grids (mad-lab's accuracy: tasks/mad_metrics.h).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "synthetic/example.h"

namespace mnemo {

enum class MadTask {
  in_context_recall,
  noisy_in_context_recall,
  fuzzy_in_context_recall,
  selective_copying,
  compression,
  memorization
};

// mad-lab's MADConfig task fields (same names). Defaults here are MADConfig's; each task's
// baseline (mad_baseline) overrides them as configs/tasks/<task>.yml does. The dataset sizes
// (num_train_examples / num_test_examples) are the run's `n_train` / `n_test` keys in mnemo.
struct MadParams {
  int64_t vocab_size = 16;
  int64_t seq_len = 128;
  double frac_noise = 0.0;
  int64_t noise_vocab_size = 0;
  int64_t num_tokens_to_copy = 0;
  int64_t k_motif_size = 1;
  int64_t v_motif_size = 1;
  bool multi_query = true;
  int64_t kv_map_seed = 12345;  // memorization: the fixed key->value map (MADConfig.seed)
};

const std::vector<MadTask>& mad_tasks();        // the six, in mad-lab's registry order
std::string mad_task_name(MadTask t);           // "in_context_recall", ...
MadTask mad_task_from_name(const std::string&); // accepts '-' or '_' and an optional "mad_" prefix
MadParams mad_baseline(MadTask t);              // configs/tasks/<task>.yml "baseline"
int64_t mad_baseline_n_train(MadTask t);        // 12,800 (memorization: 256)
constexpr int64_t kMadTestExamples = 1280;
constexpr int64_t kMadBatchSize = 128;
constexpr int64_t kMadEpochs = 200;
// The parameter names a task uses (its TaskRegistry defaults and the CLI flags).
std::vector<std::string> mad_param_keys(MadTask t);
json mad_params_to_json(MadTask t, const MadParams& p);  // only the task's keys
// Baseline overridden by `overrides` (only the task's keys; unknown key or wrong type -> Error).
MadParams mad_params_from_json(MadTask t, const json& overrides);
void validate(MadTask t, const MadParams& p);  // throws Error naming the violated constraint

// Length of input_ids (== labels): L - 1 for (noisy) in-context recall (L tokens, shifted),
// L for the others.
int64_t mad_input_length(MadTask t, const MadParams& p);

// One example from its own seed. Train and test differ only for the recall tasks: training
// labels are the next input token everywhere (plain LM), test labels only the recall targets
// (mad-lab's is_training); fuzzy recall also prompts only maximal-length keys at test time.
TokenExample mad_example(MadTask t, const MadParams& p, Split split, uint64_t example_seed);

// Memorization's global map over non-special tokens [0, n): value of each key, -1 for
// non-keys. Keys [0, n/2) and values [n/2, n) are shuffled with `seed` and zipped.
std::vector<int64_t> mad_memorization_map(int64_t n_non_special, uint64_t seed);

// Difficulty grid (configs/tasks/*.yml): the baseline ({}), then one entry per changed value,
// each varying one variable from the baseline (num_train_examples -> "n_train").
// 13/14/11/14/11/6 settings.
std::vector<json> mad_difficulty_settings(MadTask t);

// Small deterministic sampler shared by the generators (portable: no std distributions).
class MadRng {
 public:
  explicit MadRng(uint64_t seed) : gen_(seed) {}
  int64_t below(int64_t n);  // uniform in [0, n), n > 0
  double uniform();          // uniform in [0, 1)
  // An ordered k-subset of [lo, lo + n) (a uniform k-permutation, as itertools.permutations).
  std::vector<int64_t> permutation(int64_t lo, int64_t n, int64_t k);

 private:
  std::mt19937_64 gen_;
};

}  // namespace mnemo
