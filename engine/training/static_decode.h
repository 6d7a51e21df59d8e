// Greedy decoding on static tensors: the current token [B, 1] and the model's decode state live in fixed buffers, and
// one step — forward of the token through the state, the state written back into its buffers, the argmax of the
// logits written into the token buffer — never waits for the host. Captured once as a CUDA graph, each replay
// decodes one token with one launch, where the eager step issues every layer's small kernels one by one (decode at
// batch 1 is launch-bound on any GPU; docs/gpu.md#cuda-graphs). Only for models whose decode step is static
// (LanguageModelImpl::decode_step_is_static: Gated DeltaNet, DeltaNet, GLA, Mamba2, linear attention, RWKV-7, Kimi
// Delta Attention, Gated DeltaProduct, Mamba-3, MesaNet, the log-linear families, Titans LMM): a KV cache grows, and
// RoPE offsets and the hybrids' segment and window positions read the host's position, which a graph would freeze.
// The step runs inside a StaticDecodeScope (runtime/mixer.h), where mixers with a host-position decode take their
// fixed-shape form.
#pragma once
#include <torch/torch.h>

#include <memory>

#include "engine/training/cuda_graph.h"
#include "runtime/mixed_precision.h"
#include "runtime/model.h"

namespace mnemo {

class StaticDecodeStep {
 public:
  // `state`: the model's state after the prompt; `token`: the first token to feed [B, 1] (int64, on `device`). With
  // `capture`, the step is captured as a CUDA graph; the warm-up runs that capture needs are undone (state and
  // token restored), so decoding starts where the prompt left it. Throws Error naming the cause for a model whose
  // decode step is not static, or where capture is asked for and cannot be done.
  StaticDecodeStep(LanguageModelImpl& model, const ModelState& state, const torch::Tensor& token,
                   const torch::Device& device, Precision precision, bool capture);
  ~StaticDecodeStep();

  // Feeds the current token and replaces it by the argmax of its logits: the next token, [B, 1] on the device
  // (reading it waits for the step). The state advances by one token.
  const torch::Tensor& step();
  // The decode state now (the buffers themselves; pos counts the tokens consumed).
  const ModelState& state() const { return buffers_; }
  bool captured() const { return graph_ != nullptr; }

 private:
  void device_step();

  LanguageModelImpl& model_;
  torch::Device device_;
  Precision precision_;
  ModelState buffers_;
  torch::Tensor token_;
  std::unique_ptr<CapturedStep> graph_;
};

}  // namespace mnemo
