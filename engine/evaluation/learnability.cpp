#include "engine/evaluation/learnability.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "runtime/registry.h"
#include "runtime/kernels/gelu.h"

namespace mnemo {

const std::vector<std::string>& learnability_memories() {
  static const std::vector<std::string> m = {"linear", "mlp", "mlp2", "mlp3", "mlp2x4", "mlp3x4"};
  return m;
}

double default_learnability_lr(const std::string& memory) {
  return memory == "linear" || memory == "mlp" ? 0.5 : 5e-4;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool is_paper_learner(const std::string& m) { return m == "mlp2" || m == "mlp3" || m == "mlp2x4" || m == "mlp3x4"; }

// Xavier-uniform [rows, cols] from a private generator.
torch::Tensor xavier(int64_t rows, int64_t cols, at::Generator& gen, torch::Dtype dtype) {
  const double bound = std::sqrt(6.0 / static_cast<double>(rows + cols));
  return ((torch::rand({rows, cols}, gen, torch::TensorOptions().dtype(torch::kFloat64)) * 2.0 - 1.0) * bound)
      .to(dtype);
}

// linear: W <- W - (beta / ||i||^2) (W i - o) i^T, W_0 = 0.
class LinearDeltaMemory : public OnlineMemory {
 public:
  LinearDeltaMemory(int64_t d, double beta, torch::Dtype dtype) : W_(torch::zeros({d, d}, dtype)), beta_(beta) {}
  torch::Tensor predict(const torch::Tensor& i) override { return torch::mv(W_, i); }
  double observe(const torch::Tensor& i, const torch::Tensor& o) override {
    auto e = torch::mv(W_, i) - o;
    const double loss = (e.pow(2).sum() / o.pow(2).sum()).item<double>();
    const double step = beta_ / i.pow(2).sum().item<double>();
    W_.addr_(e, i, 1.0, -step);
    return loss;
  }

 private:
  torch::Tensor W_;
  double beta_;
};

// mlp: M(z) = z + W_1 GELU(W_2 z); GD on 1/2 ||e||^2 with the closed-form gradients.
class DeepMlpMemory : public OnlineMemory {
 public:
  DeepMlpMemory(int64_t d, double lr, torch::Dtype dtype, at::Generator& gen)
      : W2_(xavier(4 * d, d, gen, dtype)), W1_(xavier(d, 4 * d, gen, dtype)), lr_(lr) {}
  torch::Tensor predict(const torch::Tensor& z) override { return z + torch::mv(W1_, gelu_safe(torch::mv(W2_, z))); }
  double observe(const torch::Tensor& z, const torch::Tensor& o) override {
    auto g = deep_mlp_memory_gradients(W1_, W2_, z, o);
    const double loss = (g.error.pow(2).sum() / o.pow(2).sum()).item<double>();
    const double step = lr_ / z.pow(2).sum().item<double>();
    W1_.add_(g.grad_w1, -step);
    W2_.add_(g.grad_w2, -step);
    return loss;
  }

 private:
  torch::Tensor W2_, W1_;
  double lr_;
};

// mlpH[xE]: Linear(d->w) GELU (Linear(w->w) GELU)^{H-1} Linear(w->d), trained by an optimiser
// on loss_j itself.
class OptimizedMlpMemory : public OnlineMemory {
 public:
  OptimizedMlpMemory(int64_t d, int hidden_layers, int64_t width, const LearnabilityConfig& c, at::Generator& gen) {
    int64_t in = d;
    for (int l = 0; l <= hidden_layers; ++l) {
      const int64_t out = l == hidden_layers ? d : width;
      auto lin = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
      {
        torch::NoGradGuard g;
        lin->weight.copy_(xavier(out, in, gen, torch::kFloat64));
        lin->bias.zero_();
      }
      lin->to(c.dtype);
      layers_.push_back(lin);
      for (auto& p : lin->parameters()) params_.push_back(p);
      in = out;
    }
    if (c.optimizer == "adamw")
      opt_ = std::make_unique<torch::optim::AdamW>(
          params_, torch::optim::AdamWOptions(c.lr).betas({0.9, 0.999}).weight_decay(c.weight_decay));
    else if (c.optimizer == "adam")
      opt_ = std::make_unique<torch::optim::Adam>(
          params_, torch::optim::AdamOptions(c.lr).betas({0.9, 0.999}).weight_decay(c.weight_decay));
    else if (c.optimizer == "rmsprop")
      opt_ = std::make_unique<torch::optim::RMSprop>(params_,
                                                     torch::optim::RMSpropOptions(c.lr).weight_decay(c.weight_decay));
    else
      opt_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(c.lr).weight_decay(c.weight_decay));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x;
    for (size_t l = 0; l < layers_.size(); ++l) {
      h = layers_[l]->forward(h);
      if (l + 1 < layers_.size()) h = gelu_safe(h);
    }
    return h;
  }
  torch::Tensor predict(const torch::Tensor& i) override {
    torch::NoGradGuard g;
    return forward(i);
  }
  double observe(const torch::Tensor& i, const torch::Tensor& o) override {
    opt_->zero_grad();
    auto y = forward(i);
    auto loss = (y - o).pow(2).sum() / o.pow(2).sum();
    loss.backward();
    opt_->step();
    return loss.item<double>();
  }

 private:
  std::vector<torch::nn::Linear> layers_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

}  // namespace

DeepMemoryGradients deep_mlp_memory_gradients(const torch::Tensor& W1, const torch::Tensor& W2,
                                              const torch::Tensor& z, const torch::Tensor& o) {
  auto h = torch::mv(W2, z);
  auto a = torch::gelu(h);
  DeepMemoryGradients g;
  g.error = z + torch::mv(W1, a) - o;
  // GELU'(h) = Phi(h) + h phi(h) (exact erf GELU)
  auto dgelu = 0.5 * (1.0 + torch::erf(h * M_SQRT1_2)) + h * torch::exp(-0.5 * h * h) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
  g.grad_w1 = torch::outer(g.error, a);
  g.grad_w2 = torch::outer(torch::mv(W1.t(), g.error) * dgelu, z);
  return g;
}

LearnabilityConfig resolve(const LearnabilityConfig& in) {
  LearnabilityConfig c = in;
  validate(c.target);
  const auto& mems = learnability_memories();
  if (std::find(mems.begin(), mems.end(), c.memory) == mems.end()) {
    if (Registry::instance().has_mixer(c.memory) || Registry::instance().has_model(c.memory))
      throw Error("learnability: '" + c.memory +
                  "' is a model family; its memory is not available as a standalone online learner yet. "
                  "Memories: " + join(mems));
    throw Error("learnability: unknown memory '" + c.memory + "'; memories: " + join(mems));
  }
  const std::vector<std::string> opts = {"adamw", "adam", "rmsprop", "sgd"};
  if (std::find(opts.begin(), opts.end(), c.optimizer) == opts.end())
    throw Error("learnability: unknown optimizer '" + c.optimizer + "'; optimizers: " + join(opts));
  if (!is_paper_learner(c.memory) && c.optimizer != "adamw")
    throw Error("learnability: --optimizer applies to the mlp2/mlp3/mlp2x4/mlp3x4 learners; '" + c.memory +
                "' is updated by its own rule (GD with lr / ||i||^2)");
  if (std::isnan(c.lr)) c.lr = default_learnability_lr(c.memory);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw Error("learnability: lr must be > 0, got " + std::to_string(c.lr));
  if (c.weight_decay < 0) throw Error("learnability: weight_decay must be >= 0");
  if (c.seeds < 1) throw Error("learnability: seeds must be >= 1, got " + std::to_string(c.seeds));
  return c;
}

json to_json(const LearnabilityConfig& c) {
  json j = {{"setting", c.target.setting}, {"d", c.target.d},       {"seq_len", c.target.seq_len},
            {"memory", c.memory},          {"lr", c.lr},            {"seeds", c.seeds},
            {"seed", c.seed}};
  if (c.target.setting == 1) j["rank"] = c.target.rank;
  if (c.target.setting == 5) j["window"] = c.target.window;
  if (is_paper_learner(c.memory)) {
    j["optimizer"] = c.optimizer;
    j["weight_decay"] = c.weight_decay;
  }
  return j;
}

std::unique_ptr<OnlineMemory> make_online_memory(const LearnabilityConfig& c, int64_t d, uint64_t init_seed) {
  auto gen = at::detail::createCPUGenerator(init_seed);
  if (c.memory == "linear") return std::make_unique<LinearDeltaMemory>(d, c.lr, c.dtype);
  if (c.memory == "mlp") return std::make_unique<DeepMlpMemory>(d, c.lr, c.dtype, gen);
  const int hidden = c.memory.rfind("mlp3", 0) == 0 ? 3 : 2;
  const int64_t width = c.memory.size() > 4 ? 4 * d : d;  // "x4" suffix
  return std::make_unique<OptimizedMlpMemory>(d, hidden, width, c, gen);
}

std::vector<double> trailing_mean(const std::vector<double>& values, int64_t window) {
  std::vector<double> out(values.size());
  double sum = 0;
  for (size_t j = 0; j < values.size(); ++j) {
    sum += values[j];
    if (static_cast<int64_t>(j) >= window) sum -= values[j - window];
    out[j] = sum / static_cast<double>(std::min<int64_t>(window, j + 1));
  }
  return out;
}

LearnabilityResult run_learnability(const LearnabilityConfig& config) {
  LearnabilityResult r;
  r.config = resolve(config);
  const auto& c = r.config;
  const double t0 = wall_seconds();
  const int64_t T = c.target.seq_len;
  r.mean_loss.assign(T, 0.0);
  for (int64_t rep = 0; rep < c.seeds; ++rep) {
    const uint64_t seed = c.seed + static_cast<uint64_t>(rep);
    auto seq = learnability_sequence(c.target, seed, c.dtype);
    auto memory = make_online_memory(c, c.target.d, seed + 7919);
    std::vector<double> loss(T);
    for (int64_t j = 0; j < T; ++j) {
      loss[j] = memory->observe(seq.inputs[j], seq.targets[j]);
      if (!std::isfinite(loss[j]))
        throw Error("learnability: loss is " + std::to_string(loss[j]) + " at position " + std::to_string(j) +
                    " (setting " + std::to_string(c.target.setting) + ", memory " + c.memory + ", lr " +
                    std::to_string(c.lr) + "); lower --lr");
      r.mean_loss[j] += loss[j] / static_cast<double>(c.seeds);
    }
    r.loss.push_back(std::move(loss));
  }
  const int64_t tail = std::min<int64_t>(512, T);
  for (int64_t j = T - tail; j < T; ++j) r.final_loss += r.mean_loss[j] / static_cast<double>(tail);
  auto smooth = trailing_mean(r.mean_loss, 64);
  for (int64_t j = 0; j < T; ++j)
    if (smooth[j] < 1.0) {
      r.first_below_one = j;
      break;
    }
  r.wall_s = wall_seconds() - t0;
  return r;
}

std::vector<EvalRow> learnability_eval_rows(const LearnabilityResult& r, int64_t bucket) {
  if (bucket < 1) throw Error("learnability: bucket must be >= 1, got " + std::to_string(bucket));
  const json setting = to_json(r.config);
  const int64_t T = r.mean_loss.size();
  std::vector<EvalRow> rows;
  auto row = [&](const std::string& metric, double value, int64_t n, const json& extra, const json& details) {
    EvalRow e;
    e.model = r.config.memory;
    e.task = "learnability";
    e.metric = metric;
    json s = setting;
    s.update(extra);
    e.setting_json = s.dump();
    e.details_json = details.dump();
    e.value = value;
    e.n = n;
    rows.push_back(std::move(e));
  };
  for (int64_t s = 0; s < T; s += bucket) {
    const int64_t e = std::min(T, s + bucket);
    double mean = 0;
    json per_seed = json::array();
    for (const auto& curve : r.loss) {
      double m = 0;
      for (int64_t j = s; j < e; ++j) m += curve[j] / static_cast<double>(e - s);
      per_seed.push_back(m);
    }
    for (int64_t j = s; j < e; ++j) mean += r.mean_loss[j] / static_cast<double>(e - s);
    row("normalized_loss", mean, (e - s) * static_cast<int64_t>(r.loss.size()),
        {{"bucket_start", s}, {"bucket_end", e}}, {{"per_seed", per_seed}});
  }
  const int64_t tail = std::min<int64_t>(512, T);
  row("final_loss", r.final_loss, tail * static_cast<int64_t>(r.loss.size()), json::object(),
      {{"positions", json::array({T - tail, T})}, {"wall_s", r.wall_s}});
  row("first_below_1", static_cast<double>(r.first_below_one), static_cast<int64_t>(r.loss.size()), json::object(),
      {{"never", r.first_below_one < 0}, {"smoothing", 64}});
  return rows;
}

void write_learnability_csv(const LearnabilityResult& r, const std::string& path) {
  std::ostringstream f;
  f << "position,mean";
  for (size_t s = 0; s < r.loss.size(); ++s) f << ",seed_" << (r.config.seed + s);
  f << "\n";
  f.precision(8);
  for (size_t j = 0; j < r.mean_loss.size(); ++j) {
    f << j << "," << r.mean_loss[j];
    for (const auto& curve : r.loss) f << "," << curve[j];
    f << "\n";
  }
  write_file_atomic(path, f.str());  // tmp file, every write checked, rename
}

}  // namespace mnemo
