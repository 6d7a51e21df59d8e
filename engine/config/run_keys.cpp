#include "engine/config/run_keys.h"

#include <cmath>

namespace mnemo {

namespace run_key_table {  // named (not anonymous): unity builds join this file with others

constexpr double kNoUpperBound = HUGE_VAL;
using Group = RunKey::Group;

// Ranges: counts (integers >= lo), positive reals (> 0), fractions ([0, 1] or [0, 1)).
KeyRange count_from(double lo) { return {true, lo, kNoUpperBound, false, false}; }
KeyRange positive() { return {false, 0, kNoUpperBound, true, false}; }
KeyRange non_negative() { return {false, 0, kNoUpperBound, false, false}; }
KeyRange unit_closed() { return {false, 0, 1, false, false}; }
KeyRange unit_half_open() { return {false, 0, 1, false, true}; }

// Every training and model-skeleton key: default (its type), range, meaning, and whether it enters config_hash.
// kWatching: how a run is run or watched, not what it computes (left out of the hash).
constexpr bool kWatching = false;
std::vector<RunKey> make_run_keys() {
  return {
      // -- training --
      {"model", "transformer", "model family (see `mnemo models`)", Group::training},
      {"task", "mqar", "task (see `mnemo tasks`); its parameters are config keys too", Group::training},
      {"lr", 1e-3, "peak learning rate (AdamW)", Group::training, positive()},
      {"weight_decay", 0.1, "AdamW weight decay on 2-D weight matrices (not norms, biases, embeddings, gates)",
       Group::training, non_negative()},
      {"beta1", 0.9, "AdamW beta1", Group::training, unit_half_open()},
      {"beta2", 0.95, "AdamW beta2", Group::training, unit_half_open()},
      {"adam_eps", 1e-8, "AdamW epsilon", Group::training, positive()},
      {"grad_clip", 1.0, "max global gradient norm (0 = off)", Group::training, non_negative()},
      {"warmup_frac", 0.1, "linear warm-up as a fraction of steps, then cosine decay", Group::training, unit_closed()},
      {"min_lr_ratio", 0.1, "final learning rate as a fraction of lr", Group::training, unit_closed()},
      {"steps", 1000, "optimiser steps", Group::training, count_from(1)},
      {"batch_size", 64,
       "sequences per micro-batch (grad_accum micro-batches per step); data-parallel: the whole micro-batch, "
       "batch_size / world_size rows per rank",
       Group::training, count_from(1)},
      {"seed", 0, "seed for initialisation, data and order", Group::training},
      {"eval_every", 100, "evaluate on the test split (and checkpoint) every N steps", Group::training, count_from(1),
       kWatching},
      {"log_every", 10, "progress line and train metrics every N steps", Group::training, count_from(1), kWatching},
      {"n_train", 10000, "training examples (cycled in seeded epochs); 0 = a fresh example each time", Group::training,
       count_from(0)},
      {"n_test", 1000, "test examples (disjoint seed range)", Group::training, count_from(0)},
      {"eval_batch_size", 256, "batch size for evaluation", Group::training, count_from(1), kWatching},
      {"early_stop_acc", 0.99, "stop when test accuracy exceeds this (Zoology: 0.99); 0 = never", Group::training,
       unit_closed()},
      {"device", "auto", "cpu | cuda | cuda:N | auto", Group::training, std::nullopt, kWatching},
      {"grad_accum", 1,
       "micro-batches per optimiser step (each of batch_size sequences; equal to one batch of batch_size x "
       "grad_accum)",
       Group::training, count_from(1)},
      {"cuda_graph", false,
       "CUDA: capture the training step (forward, backward, clip, AdamW) once as a CUDA graph and replay it every "
       "step; one batch shape, grad_accum 1, one process, no reset_state_at_bos (docs/gpu.md#cuda-graphs)",
       Group::training, std::nullopt, kWatching},
      {"warmup_steps", -1, "linear warm-up in steps (-1 = use warmup_frac)", Group::training, count_from(-1)},
      {"primary_metric", "",
       "held-out metric for best_* and the progress line (default: accuracy for token tasks, ppl for lm)",
       Group::training, std::nullopt},
      {"size", "",
       "named size: tiny, small, base, 170M, 340M, 760M, 1.3B, mom-1.3B, lattice-110M/340M/760M (sets d_model, "
       "n_layers, n_heads; explicit keys win; `mnemo models --sizes`)",
       Group::training, std::nullopt},
      {"recipe", "",
       "a paper's training recipe: titans (Titans/Miras/Atlas), mom, lattice (optimiser, schedule, batch in tokens, "
       "context; explicit keys win)",
       Group::training, std::nullopt},
      {"precision", "fp32",
       "fp32 | bf16 | fp64 (bf16 autocast on the device: matmuls and attention in bf16, every recurrence in fp32, "
       "fp32 parameters and optimiser state; docs/models.md#numerical-stability. fp64: everything in float64, for "
       "equivalence checks of whole runs)",
       Group::training, std::nullopt},
      // -- model skeleton --
      {"d_model", 128, "model width", Group::skeleton, count_from(1)},
      {"n_layers", 2, "blocks", Group::skeleton, count_from(1)},
      {"n_heads", 4, "heads per mixer", Group::skeleton, count_from(1)},
      {"mlp_ratio", 4.0,
       "feed-forward hidden ratio r: SwiGLU's I = 256*ceil(floor(d*r*2/3)/256); rwkv_channel_mix's I = "
       "32*ceil(floor(d*r)/32)",
       Group::skeleton, positive()},
      {"tie_embeddings", true, "tie the LM head to the embedding", Group::skeleton},
      {"norm_eps", 1e-6, "epsilon of the skeleton's norms (block_norm)", Group::skeleton, positive()},
      {"block_norm", "rmsnorm",
       "the skeleton's norms (before each mixer and feed-forward part, after the last block, and embed_norm): "
       "rmsnorm | layernorm (with bias, as RWKV's blocks)",
       Group::skeleton, std::nullopt},
      {"embed_norm", false, "a norm (block_norm) right after the embedding, as RWKV's first block", Group::skeleton,
       std::nullopt},
      {"layers", json::array(),
       "per-layer mixers, repeated over n_layers (empty = the model's own pattern): names or {\"mixer\": name, key: "
       "value, ...} with arguments for those layers alone",
       Group::skeleton},
      {"block_mlp", true,
       "each block's pre-RMSNorm SwiGLU after the mixer (false: norm, mixer, residual only, as Mamba's blocks and "
       "flash-linear-attention's Mamba2)",
       Group::skeleton, std::nullopt},
      {"block_ffn", "swiglu",
       "each block's feed-forward part: swiglu | cms (the Continuum Memory System: residual MLP memories updated in "
       "context every cms_chunk_sizes tokens; docs/models.md#continuum-memory-system) | rwkv_channel_mix (RWKV's "
       "token-shift ReLU^2 channel mix; docs/models.md#rwkv-7)",
       Group::skeleton, std::nullopt},
      {"cms_chunk_sizes", json::array({16, 64, 256}),
       "block_ffn cms: one memory level per entry, fastest first; a level changes once per that many tokens (0: "
       "never, a plain residual MLP)",
       Group::skeleton, std::nullopt},
      {"cms_hidden_ratio", 1.0, "block_ffn cms: each level's hidden width as a multiple of d_model", Group::skeleton,
       positive()},
      {"cms_lr", 0.1, "block_ffn cms: scale of the levels' in-context step (eta_t = cms_lr * sigmoid(x w + b))",
       Group::skeleton, non_negative()},
  };
}

json defaults_of(Group g) {
  json d = json::object();
  for (const RunKey& k : run_keys())
    if (k.group == g) d[k.name] = k.default_value;
  return d;
}

}  // namespace run_key_table

std::string KeyRange::describe() const {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  if (hi == run_key_table::kNoUpperBound) return std::string(lo_open ? "> " : ">= ") + num(lo);
  return "in " + std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
}

const std::vector<RunKey>& run_keys() {
  static const std::vector<RunKey> keys = run_key_table::make_run_keys();
  return keys;
}

const RunKey* find_run_key(const std::string& name) {
  for (const RunKey& k : run_keys())
    if (k.name == name) return &k;
  return nullptr;
}

const json& training_defaults() {
  static const json d = run_key_table::defaults_of(RunKey::Group::training);
  return d;
}

const json& skeleton_defaults() {
  static const json d = run_key_table::defaults_of(RunKey::Group::skeleton);
  return d;
}

const json& config_key_help() {
  static const json h = [] {
    json out = json::object();
    for (const RunKey& k : run_keys()) out[k.name] = k.help;
    return out;
  }();
  return h;
}

}  // namespace mnemo
