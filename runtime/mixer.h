// The pluggable token mixer of a block, and the decode state it carries.
#pragma once
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "core/common.h"

namespace mnemo {

struct PackedSequences;  // runtime/packed_sequences.h

// Per-layer recurrent/decode state: named tensors (KV cache, conv cache, memory state, ...)
// plus `pos`, the number of tokens consumed before the current call (the model advances it
// after each forward; mixers read it as their position offset). Copyable by value (tensors are cloned by clone()).
struct LayerState {
  std::map<std::string, torch::Tensor> tensors;
  int64_t pos = 0;

  bool has(const std::string& k) const { return tensors.count(k) > 0; }
  torch::Tensor& at(const std::string& k) { return tensors.at(k); }
  LayerState clone() const;
  int64_t bytes() const;  // memory held by the state (decode-memory benchmarks)
};

// Set while a static decode step runs (engine/training/static_decode.h, the step a CUDA graph replays): a mixer whose
// usual decode step reads LayerState::pos on the host (the log-linear families' Fenwick carry) takes its fixed-shape
// form instead, with the position kept in a state tensor. Thread-local; scopes nest.
inline bool& static_decode_flag() {
  thread_local bool active = false;
  return active;
}
inline bool static_decode_active() { return static_decode_flag(); }
class StaticDecodeScope {
 public:
  StaticDecodeScope() : previous_(static_decode_flag()) { static_decode_flag() = true; }
  ~StaticDecodeScope() { static_decode_flag() = previous_; }
  StaticDecodeScope(const StaticDecodeScope&) = delete;
  StaticDecodeScope& operator=(const StaticDecodeScope&) = delete;

 private:
  bool previous_;
};

// Tensors that one forward of a model hands from a layer to the later layers of the same forward (RWKV-7's value
// residual: the first rwkv7 layer's values, docs/models.md#rwkv-7). The model empties it before and after each
// forward, so nothing is kept between calls; decode state stays in LayerState.
struct ModelScratch {
  std::map<std::string, torch::Tensor> tensors;
};

// What a factory receives: model-wide sizes plus the family's own (resolved) arguments.
struct MixerContext {
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t layer_index = 0;
  int64_t n_layers = 0;
  json args;  // the family's args struct as JSON, defaults merged with the user's config
  // The model's scratch (null for a mixer built on its own: it then sees only its own layer), and whether this is
  // the first layer of the model with this mixer.
  std::shared_ptr<ModelScratch> scratch;
  bool first_layer_of_mixer = true;
};

// A token mixer maps [B, T, D] -> [B, T, D] causally.
//  - state == nullptr: a stateless full forward from the initial state (training, scoring).
//  - state != nullptr: continue from *state (an empty LayerState is the initial state) and leave
//    the updated state in it; prefill(T tokens) then decode(1 token) repeatedly must equal the
//    full forward (tested for every family).
class Mixer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x, LayerState* state) = 0;
  // Auxiliary loss of the last forward (e.g. MoM load balancing); undefined tensor if none.
  virtual torch::Tensor aux_loss() const { return {}; }
  // Packed sequences (docs/models.md#packed-sequences): x [1, N, D] holds seqs.count() sequences back to back, each
  // from the initial state, and the result [1, N, D] equals forward(sequence, nullptr) of each one. A mixer with
  // such a form (its fused chunk kernel takes cu_seqlens) says so for the tensors it would take it on; the model
  // runs every other mixer on padded rows instead.
  virtual bool packs_sequences(const torch::Tensor& x) const { return false; }
  // Whether a decode step (T = 1 with a state) reads nothing from the host but its input and state tensors and
  // keeps every state tensor's shape: no LayerState::pos (RoPE offsets, chunk-aligned anchors), no growing cache,
  // no value read back to the host. Such a step can be captured once as a CUDA graph and replayed per token
  // (engine/training/static_decode.h); false where that is not known to hold.
  virtual bool decode_step_is_static() const { return false; }
  virtual torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) {
    (void)x, (void)seqs;
    throw Error("this mixer has no packed-sequence form (the model pads its sequences instead)");
  }
};

}  // namespace mnemo
