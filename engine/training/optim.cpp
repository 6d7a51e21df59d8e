#include "engine/training/optim.h"

#include <cmath>

#include "runtime/no_weight_decay.h"

namespace mnemo {

bool decays(const std::string& name, const torch::Tensor& p, const std::set<std::string>& no_decay) {
  return p.dim() >= 2 && no_decay.count(name) == 0;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const json& cfg) {
  const auto no_decay = no_weight_decay_parameters(model);
  std::vector<torch::Tensor> with_decay, without_decay;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    (decays(item.key(), item.value(), no_decay) ? with_decay : without_decay).push_back(item.value());
  }
  auto base = torch::optim::AdamWOptions(cfg.at("lr").get<double>())
                  .betas({cfg.at("beta1").get<double>(), cfg.at("beta2").get<double>()})
                  .eps(cfg.at("adam_eps").get<double>());
  auto decay_opts = std::make_unique<torch::optim::AdamWOptions>(base);
  decay_opts->weight_decay(cfg.at("weight_decay").get<double>());
  auto no_decay_opts = std::make_unique<torch::optim::AdamWOptions>(base);
  no_decay_opts->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(with_decay, std::move(decay_opts));
  groups.emplace_back(without_decay, std::move(no_decay_opts));
  return std::make_unique<torch::optim::AdamW>(groups, base);
}

double cosine_lr(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio) {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / warmup;
  const int64_t decay_steps = std::max<int64_t>(1, total - warmup - 1);
  double progress = std::min(1.0, static_cast<double>(step - warmup) / decay_steps);
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

}  // namespace mnemo
