// Online learning of the learnability targets (docs/tasks.md#learnability; Atlas "Learnability
// Experiments"): a memory M sees the pairs (i_j, o_j) in order; at each position the
// prequential loss  loss_j = ||M(i_j) - o_j||^2 / ||o_j||^2  is recorded BEFORE the update at j
// (the paper prints ||i_j - o_j||^2, a typo), then M takes one step on the pair.
//
// Memories:
//   linear            M(i) = W i, W_0 = 0; delta rule with an l2-normalised step:
//                     W <- W - (lr / ||i||^2) (W i - o) i^T         (lr = beta, default 0.5)
//   mlp               the runtime's deep memory (docs/models.md#deep-memory): M(z) = z + W_1 GELU(W_2 z),
//                     W_2 [4d x d], W_1 [d x 4d], Xavier-uniform; GD on l = 1/2 ||e||^2 with the
//                     closed-form gradients, step lr / ||i||^2 (default lr 0.5)
//   mlp2 mlp3 mlp2x4 mlp3x4
//                     the paper's learners (docs/tasks.md#learnability): Linear(d->w) GELU (Linear(w->w) GELU)^{h-1}
//                     Linear(w->d) with h = 2 or 3 hidden layers, w = d or 4d; Xavier-uniform,
//                     zero biases; one optimiser step on grad loss_j (adamw | adam | rmsprop |
//                     sgd; default AdamW lr 5e-4, betas (0.9, 0.999), wd 0)
// A mixer name of the model registry is refused with a clear message (no standalone memory).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "results/db.h"
#include "synthetic/learnability.h"

namespace mnemo {

struct LearnabilityConfig {
  LearnabilityTargetParams target;
  std::string memory = "mlp2";
  std::string optimizer = "adamw";  // MLP learners only
  double lr = NAN;                  // NaN: the memory's default
  double weight_decay = 0.0;
  int64_t seeds = 3;      // repetitions; repetition r uses sequence and init seed `seed + r`
  uint64_t seed = 0;
  torch::Dtype dtype = torch::kFloat32;
};

const std::vector<std::string>& learnability_memories();
double default_learnability_lr(const std::string& memory);
// Validates the memory (mixer names get an explanatory Error), optimiser and numbers; fills
// the default lr. Returns the resolved config.
LearnabilityConfig resolve(const LearnabilityConfig& c);
json to_json(const LearnabilityConfig& c);

// One online learner (created per repetition).
class OnlineMemory {
 public:
  virtual ~OnlineMemory() = default;
  virtual torch::Tensor predict(const torch::Tensor& input) = 0;  // [d] -> [d], no grad
  // Prequential step: returns loss_j before the update, then updates on (input, target).
  virtual double observe(const torch::Tensor& input, const torch::Tensor& target) = 0;
};
// The `mlp` memory's closed-form gradients of l = 1/2 ||M(z) - o||^2 (docs/models.md#deep-memory):
//   h = W_2 z, a = GELU(h), e = z + W_1 a - o;  grad W_1 = e a^T;
//   delta = (W_1^T e) * GELU'(h);  grad W_2 = delta z^T.
struct DeepMemoryGradients {
  torch::Tensor error, grad_w1, grad_w2;
};
DeepMemoryGradients deep_mlp_memory_gradients(const torch::Tensor& W1, const torch::Tensor& W2,
                                              const torch::Tensor& z, const torch::Tensor& o);

std::unique_ptr<OnlineMemory> make_online_memory(const LearnabilityConfig& resolved, int64_t d, uint64_t init_seed);

struct LearnabilityResult {
  LearnabilityConfig config;               // resolved
  std::vector<std::vector<double>> loss;   // [repetition][position]
  std::vector<double> mean_loss;           // per position, mean over repetitions
  double final_loss = 0;                   // mean of mean_loss over the last min(512, T) positions
  int64_t first_below_one = -1;            // first position (0-based) where the trailing mean over
                                           // 64 positions is < 1; -1 = never
  double wall_s = 0;
};

LearnabilityResult run_learnability(const LearnabilityConfig& config);

// Result rows (task "learnability", model = the memory; setting_json = to_json(config)):
//  "normalized_loss" per position bucket [bucket_start, bucket_end): mean over its positions of
//  the seed-mean loss (details: per-seed bucket means; n = seeds * positions);
//  "final_loss" (mean over the last 512 positions) and "first_below_1" (-1 = never).
std::vector<EvalRow> learnability_eval_rows(const LearnabilityResult& r, int64_t bucket = 64);
// CSV: position, mean, seed_<s>... (one line per position; the raw curves).
void write_learnability_csv(const LearnabilityResult& r, const std::string& path);

// out[j] = mean(values[max(0, j - window + 1) .. j]).
std::vector<double> trailing_mean(const std::vector<double>& values, int64_t window);

}  // namespace mnemo
