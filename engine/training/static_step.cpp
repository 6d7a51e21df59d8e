#include "engine/training/static_step.h"

#include <string>

#include "core/common.h"
#include "engine/evaluation/token_eval.h"
#include "engine/training/optim.h"

namespace mnemo {

StaticTrainStep::StaticTrainStep(Backbone& model, torch::optim::AdamW& optimizer, const TrainBatch& example,
                                 double clip, const torch::Device& device, Precision precision, bool capture)
    : model_(model), optimizer_(optimizer), clip_(clip), device_(device), precision_(precision) {
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw Error("cuda_graph: AdamW with amsgrad has no static step");
    Group g{{}, {}, {}, o.weight_decay(), o.eps(), std::get<0>(o.betas()), std::get<1>(o.betas())};
    for (auto& p : group.params()) {
      auto& st = adamw_state(optimizer, p);
      steps_done_ = std::max(steps_done_, st.step());  // shared by every parameter the optimiser has stepped
      g.params.push_back(p);
      g.exp_avg.push_back(st.exp_avg());
      g.exp_avg_sq.push_back(st.exp_avg_sq());
    }
    groups_.push_back(std::move(g));
  }
  ids_ = example.input_ids.to(device).clone();
  labels_ = example.labels.to(device).clone();
  const auto scalar = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  lr_ = torch::zeros({}, scalar);
  t_ = torch::ones({}, scalar);
  loss_ = torch::zeros({}, scalar);
  aux_ = torch::full({}, std::numeric_limits<double>::quiet_NaN(), scalar);
  norm_ = torch::full({}, std::numeric_limits<double>::quiet_NaN(), scalar);
  if (!capture) return;

  // Capture runs the step a few times first (CapturedStep's warm-up): keep the weights and moments, and put them
  // back afterwards, so that the run trains on each batch once.
  std::vector<torch::Tensor> kept, saved;
  {
    torch::NoGradGuard no_grad;
    for (const auto& g : groups_)
      for (const auto* list : {&g.params, &g.exp_avg, &g.exp_avg_sq})
        for (const auto& x : *list) kept.push_back(x), saved.push_back(x.detach().clone());
  }
  load(example, 0.0);
  graph_ = std::make_unique<CapturedStep>([this] { device_step(); }, device, /*warmup=*/2);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < kept.size(); ++i) kept[i].detach().copy_(saved[i]);
}

StaticTrainStep::~StaticTrainStep() = default;

void StaticTrainStep::load(const TrainBatch& batch, double lr) {
  if (batch.input_ids.sizes() != ids_.sizes() || batch.labels.sizes() != labels_.sizes())
    throw Error("cuda_graph: a batch of shape " + c10::str(batch.input_ids.sizes()) + " where the static step's is " +
                c10::str(ids_.sizes()) + " (a captured step needs one shape for the whole run)");
  torch::NoGradGuard no_grad;
  ids_.copy_(batch.input_ids, /*non_blocking=*/true);
  labels_.copy_(batch.labels, /*non_blocking=*/true);
  lr_.fill_(lr);
  t_.fill_(static_cast<double>(steps_done_ + 1));  // AdamW's step number of this update
}

void StaticTrainStep::device_step() {
  for (auto& p : model_.module->parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
  torch::Tensor loss, aux;
  {
    const AutocastScope autocast(device_, precision_);  // forward and loss; backward outside (as torch.amp)
    auto logits = model_.forward(ids_);
    loss = token_loss(logits, labels_);
    aux = model_.aux_loss();
  }
  (aux.defined() ? loss + aux : loss).backward();

  torch::NoGradGuard no_grad;
  loss_.copy_(loss.detach());
  if (aux.defined()) aux_.copy_(aux.detach());
  if (clip_ > 0) {  // torch's clip_grad_norm_, with the norm left on the device
    std::vector<torch::Tensor> grads, norms;
    for (auto& p : model_.module->parameters())
      if (p.grad().defined()) grads.push_back(p.grad()), norms.push_back(p.grad().norm());
    if (!norms.empty()) {
      auto total = torch::stack(norms).norm();
      norm_.copy_(total);
      auto coef = (clip_ / (total + 1e-6)).clamp_max(1.0);
      for (auto& g : grads) g.mul_(coef);
    }
  }
  // AdamW (torch::optim::AdamW's update; the header's equations) with lr and t read from the device.
  for (auto& g : groups_) {
    auto bias1 = 1.0 - torch::pow(g.beta1, t_);
    auto bias2_sqrt = (1.0 - torch::pow(g.beta2, t_)).sqrt();
    auto step_size = lr_ / bias1;
    auto decay = 1.0 - lr_ * g.weight_decay;
    for (size_t i = 0; i < g.params.size(); ++i) {
      auto p = g.params[i].detach();
      const auto& grad = g.params[i].grad();
      if (!grad.defined()) continue;  // as the eager step: a parameter without a gradient is not touched
      if (g.weight_decay != 0) p.mul_(decay);
      g.exp_avg[i].mul_(g.beta1).add_(grad, 1.0 - g.beta1);
      g.exp_avg_sq[i].mul_(g.beta2).addcmul_(grad, grad, 1.0 - g.beta2);
      auto denom = (g.exp_avg_sq[i].sqrt() / bias2_sqrt).add_(g.eps);
      p.sub_(g.exp_avg[i] / denom * step_size);
    }
  }
}

void StaticTrainStep::advance_host_steps() {
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.grad().defined()) {
        auto& st = adamw_state(optimizer_, p);
        st.step(st.step() + 1);
      }
}

StaticTrainStep::Values StaticTrainStep::run(const TrainBatch& batch, double lr) {
  load(batch, lr);
  if (graph_)
    graph_->replay();
  else
    device_step();
  advance_host_steps();
  ++steps_done_;
  auto host = torch::stack({loss_, aux_, norm_}).to(torch::kCPU);
  const double* v = host.data_ptr<double>();
  Values out;
  out.loss = v[0];
  out.aux = v[1];
  out.grad_norm = clip_ > 0 ? v[2] : 0.0;  // as the eager step reports it with the clip off
  return out;
}

}  // namespace mnemo
