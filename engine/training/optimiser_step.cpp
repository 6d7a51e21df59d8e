#include "engine/training/optimiser_step.h"

#include <string>

#include "core/signals.h"
#include "engine/evaluation/token_eval.h"

namespace mnemo {

namespace {
// reset_state_at_bos: every document of the windows from the initial state (docs/models.md#packed-sequences).
torch::Tensor packed_forward(Backbone& model, const TrainBatch& b) {
  if (!model.forward_packed)
    throw Error("reset_state_at_bos: the " + model.kind + " backbone cannot restart its state inside a row");
  return model.forward_packed(b.input_ids, b.sequence_starts);
}

}  // namespace

StepResult graphed_step(StaticTrainStep& graphed, DataSource& data, int64_t step, double lr) {
  StepResult r;
  const double t0 = wall_seconds();
  const TrainBatch b = data.batch(step, 0);
  r.data_s = wall_seconds() - t0;
  const auto v = graphed.run(b, lr);
  r.loss = v.loss;
  if (std::isfinite(v.aux)) r.aux = v.aux;
  r.grad_norm = v.grad_norm;
  r.tokens = b.tokens;
  if (!std::isfinite(r.loss))
    throw Error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(step + 1) +
                "; lower lr or check the model");
  return r;
}

StepResult optimiser_step(Backbone& model, torch::optim::Optimizer& optimizer, DataSource& data, int64_t step,
                          int64_t accum, double clip, const torch::Device& device, Precision precision,
                          Distributed* dist) {
  StepResult r;
  const int world = dist ? dist->world_size() : 1;
  std::vector<TrainBatch> micro;
  int64_t labelled = 0;  // over the micro-batches and every rank's share of them
  const double t0 = wall_seconds();
  for (int64_t m = 0; m < accum; ++m) {
    micro.push_back(data.batch(step, m));
    labelled += micro.back().labelled_all_ranks >= 0 ? micro.back().labelled_all_ranks : micro.back().labelled;
  }
  r.data_s = wall_seconds() - t0;
  optimizer.zero_grad();
  double loss_sum = 0, aux_sum = 0;
  bool has_aux = false;
  for (size_t m = 0; m < micro.size(); ++m) {
    const TrainBatch& b = micro[m];
    torch::Tensor loss, aux;
    {
      const AutocastScope autocast(device, precision);  // forward and loss; backward outside (as torch.amp)
      auto logits = b.sequence_starts.defined() ? packed_forward(model, b) : model.forward(b.input_ids);
      // One rank, accum 1: the mean, as before gradient accumulation existed (identical numbers); else the sum over the step's labels.
      loss = accum == 1 && world == 1 ? token_loss(logits, b.labels)
                                      : token_loss_sum(logits, b.labels) / double(std::max<int64_t>(1, labelled));
      aux = model.aux_loss();
    }
    auto total = aux.defined() ? loss + aux / double(accum * world) : loss;
    if (dist && m + 1 == micro.size()) dist->begin_gradient_sync(step);  // buckets all-reduce during this backward
    total.backward();
    loss_sum += loss.item<double>();
    if (aux.defined()) aux_sum += aux.item<double>() / double(accum), has_aux = true;
    r.tokens += b.tokens;
  }
  if (dist) {  // gradients summed over ranks, then the step's figures and stop requests (one small message)
    dist->finish_gradient_sync(1.0);
    const auto c = dist->all_reduce_sum({loss_sum, aux_sum / world, has_aux ? 1.0 : 0.0, double(r.tokens),
                                         stop_requested() ? 1.0 : 0.0},
                                        step, "step's control message");
    loss_sum = c[0], aux_sum = c[1], has_aux = c[2] > 0, r.tokens = static_cast<int64_t>(c[3]), r.stop = c[4] > 0;
  }
  r.loss = loss_sum;
  if (has_aux) r.aux = aux_sum;
  if (!std::isfinite(r.loss))
    throw Error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(step + 1) +
                "; lower lr or check the model");
  if (clip > 0) r.grad_norm = torch::nn::utils::clip_grad_norm_(model.module->parameters(), clip);
  optimizer.step();
  return r;
}


std::unique_ptr<StaticTrainStep> make_graphed_step(const json& cfg, Backbone& model, torch::optim::AdamW& optimizer,
                                                   DataSource& data, int64_t step, double clip,
                                                   const torch::Device& device, Precision precision,
                                                   const Distributed* dist) {
  if (!cfg.at("cuda_graph").get<bool>()) return nullptr;
  if (!device.is_cuda())
    throw Error("cuda_graph: needs a CUDA device, the run's device is " + device.str() + " (set device cuda)");
  if (cfg.at("grad_accum").get<int64_t>() != 1)
    throw Error("cuda_graph: captures one micro-batch a step; grad_accum is " +
                std::to_string(cfg.at("grad_accum").get<int64_t>()) + " (raise batch_size instead)");
  if (dist) throw Error("cuda_graph: a data-parallel run's gradients are reduced between ranks; not captured");
  if (cfg.contains("reset_state_at_bos") && cfg.at("reset_state_at_bos").get<bool>())
    throw Error("cuda_graph: reset_state_at_bos gives each batch its own document bounds; not captured");
  return std::make_unique<StaticTrainStep>(model, optimizer, data.batch(step, 0), clip, device, precision,
                                           /*capture=*/true);
}


}  // namespace mnemo
