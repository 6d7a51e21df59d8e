#include "engine/training/static_decode.h"

#include <string>

#include "core/common.h"

namespace mnemo {

StaticDecodeStep::StaticDecodeStep(LanguageModelImpl& model, const ModelState& state, const torch::Tensor& token,
                                   const torch::Device& device, Precision precision, bool capture)
    : model_(model), device_(device), precision_(precision) {
  if (!model.decode_step_is_static())
    throw Error("static decode: model '" + model.config().model +
                "' has a decode step that reads the host's position or grows its state (a KV cache, RoPE, "
                "chunk-aligned memories); docs/gpu.md#cuda-graphs lists the families that decode so");
  if (token.dim() != 2 || token.size(1) != 1)
    throw Error("static decode: the token must be [batch, 1], got " + c10::str(token.sizes()));
  torch::NoGradGuard no_grad;
  // Every state tensor on the device, the host-side scalars among them (Titans' offset in the chunk), so that the
  // captured step reads and writes only device memory.
  for (const LayerState& ls : state) {
    buffers_.push_back(ls.clone());
    for (auto& kv : buffers_.back().tensors) kv.second = kv.second.to(device);
  }
  token_ = token.to(device).clone();
  if (!capture) return;

  // CapturedStep runs the step a few times before capturing it: keep the state and the token, put them back after.
  const torch::Tensor kept_token = token_.clone();
  std::vector<torch::Tensor> saved;
  for (const LayerState& ls : buffers_)
    for (const auto& kv : ls.tensors) saved.push_back(kv.second.clone());
  graph_ = std::make_unique<CapturedStep>([this] { device_step(); }, device, /*warmup=*/2);
  size_t i = 0;
  for (LayerState& ls : buffers_)
    for (auto& kv : ls.tensors) kv.second.copy_(saved[i++]);
  token_.copy_(kept_token);
}

StaticDecodeStep::~StaticDecodeStep() = default;

void StaticDecodeStep::device_step() {
  torch::NoGradGuard no_grad;
  ModelState work = buffers_;  // the same tensors; the mixers put their new state tensors in `work`
  torch::Tensor logits;
  {
    const StaticDecodeScope fixed_shapes;
    const AutocastScope autocast(device_, precision_);
    logits = model_.forward(token_, &work);
  }
  for (size_t l = 0; l < work.size(); ++l) {
    for (const auto& kv : work[l].tensors) {
      auto it = buffers_[l].tensors.find(kv.first);
      if (it == buffers_[l].tensors.end() || it->second.sizes() != kv.second.sizes())
        throw Error("static decode: layer " + std::to_string(l) + "'s state '" + kv.first + "' " +
                    (it == buffers_[l].tensors.end() ? std::string("appeared during decoding")
                                                     : "changed shape from " + c10::str(it->second.sizes()) +
                                                           " to " + c10::str(kv.second.sizes())) +
                    " (the model's decode step is not static)");
      if (!it->second.is_same(kv.second)) it->second.copy_(kv.second);
    }
  }
  token_.copy_(logits.select(1, logits.size(1) - 1).argmax(-1, true));
}

const torch::Tensor& StaticDecodeStep::step() {
  if (graph_)
    graph_->replay();
  else
    device_step();
  for (LayerState& ls : buffers_) ls.pos += token_.size(1);
  return token_;
}

}  // namespace mnemo
