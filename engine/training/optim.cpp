#include "engine/training/optim.h"

#include <cmath>
#include <sstream>

#include "core/torch_compat.h"
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
  return std::make_unique<MultiTensorAdamW>(groups, base);
}

namespace {

// The key of a parameter's entry in Optimizer::state_, chosen by the map's key type: its TensorImpl, or (LibTorch
// 1.13) that pointer printed as c10::guts::to_string prints it (through an ostringstream).
[[maybe_unused]] void* state_key(const torch::Tensor& p, void* /*key type*/) { return p.unsafeGetTensorImpl(); }
[[maybe_unused]] std::string state_key(const torch::Tensor& p, const std::string& /*key type*/) {
  std::ostringstream os;
  os << p.unsafeGetTensorImpl();
  return os.str();
}

}  // namespace

torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& p) {
  auto& states = optimizer.state();
  using Key = std::decay_t<decltype(states)>::key_type;
  const Key key = state_key(p, Key{});
  auto it = states.find(key);
  if (it == states.end()) {
    auto fresh = std::make_unique<torch::optim::AdamWParamState>();
    fresh->step(0);
    fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = states.emplace(key, std::move(fresh)).first;
  }
  return static_cast<torch::optim::AdamWParamState&>(*it->second);
}

bool MultiTensorAdamW::fusable() const {
  if (!torch_compat::has_fused_adamw()) return false;
  for (const auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) return false;
    const torch::Tensor* first = nullptr;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) return false;
      if (first && (p.device() != first->device() || p.scalar_type() != first->scalar_type())) return false;
      first = &p;
    }
  }
  return true;
}

torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  last_step_fused_ = fusable();
  if (!last_step_fused_) return torch::optim::AdamW::step(std::move(closure));
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode grad_mode(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& st = adamw_state(*this, p);
      StepCount& count = step_counts_[p.unsafeGetTensorImpl()];
      if (count.at != st.step() || !count.value.defined())
        count.value = torch::full({}, static_cast<double>(st.step()), p.options().dtype(torch::kFloat32));
      st.step(st.step() + 1);  // the kernel adds one to count.value likewise
      count.at = st.step();
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(st.exp_avg());
      exp_avg_sqs.push_back(st.exp_avg_sq());
      steps.push_back(count.value);
    }
    if (params.empty()) continue;
    torch_compat::fused_adamw_step(params, grads, exp_avgs, exp_avg_sqs, steps, o.lr(), std::get<0>(o.betas()),
                                   std::get<1>(o.betas()), o.weight_decay(), o.eps());
  }
  return loss;
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
