// Titans neural long-term memory (docs/models.md#titans): the LMM kernel (chunk-wise dual form and the
// token-by-token reference/decode step) and the LMM core module shared by the titans_lmm, titans_mag and
// titans_mac mixers (the attention of MAG/MAC is runtime/blocks/window_attention.h).
//
// Kernel recurrence (per head, column form, read after write docs/models.md#conventions), gradients at the chunk anchor M^0:
//   u_t = ∇_M ½||M^0(k_t) - v_t||²,  S_t = η_t S_{t-1} - θ_t u_t,  M_t = (1 - α_t) M_{t-1} + S_t,  y_t = M_t(q_t)
// chunks of b tokens aligned to absolute positions; the anchor becomes M_t after every b-th token (docs/models.md#titans).
#pragma once
#include <torch/torch.h>

#include <string>

#include "core/common.h"

#include "runtime/deep_memory/memory.h"
#include "runtime/layers.h"
#include "runtime/mixer.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"

namespace mnemo {

struct TitansMemoryState {
  MemoryWeights w;       // M_t, each [B, H, out, in]
  MemoryWeights s;       // momentum S_t (empty: zero / no momentum)
  MemoryWeights anchor;  // gradient anchor M^0 (empty: w, valid when offset == 0)
  int64_t offset = 0;    // tokens of the current chunk already absorbed (absolute position mod b)
};

struct TitansLmmResult {
  torch::Tensor y;  // [B, T, H, d_out]
  TitansMemoryState state;
};

// q, k: [B, T, H, d_in]; v: [B, T, H, d_out]; log_keep = log(1 - α) [B, T, H] (undefined: α ≡ 0);
// log_eta = log η [B, T, H] (undefined: η ≡ 0, no momentum); theta [B, T, H].
// Compute dtype fp64 if q is fp64, else fp32; y returned in v's dtype.
TitansLmmResult titans_lmm_chunk(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                                 const torch::Tensor& theta, const TitansMemoryState& init, int64_t chunk_size,
                                 double inner_grad_clip = 0);
// titans_lmm_chunk runs each chunk as one fused autograd node (runtime/deep_memory/fused_chunk.h) for the residual-MLP
// memory with momentum and decay. The composed form below runs it op by op under autograd, whatever the memory
// kind and gates: the reference the fused node's hand-written backward is tested against.
TitansLmmResult titans_lmm_chunk_composed(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v, const torch::Tensor& log_keep,
                                          const torch::Tensor& log_eta, const torch::Tensor& theta,
                                          const TitansMemoryState& init, int64_t chunk_size,
                                          double inner_grad_clip = 0);

// Token-by-token with materialised weights: the reference and the decode step.
TitansLmmResult titans_lmm_recurrent(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& log_keep,
                                     const torch::Tensor& log_eta, const torch::Tensor& theta,
                                     const TitansMemoryState& init, int64_t chunk_size, double inner_grad_clip = 0);

// One decode token (T == 1) on fixed shapes, for a step that a CUDA graph replays: titans_lmm_recurrent's step with
// the position in the chunk held on the device (`offset`, an int64 scalar: the tokens of the current chunk absorbed;
// init.offset is not read) and the gradient anchor replaced by the new memory through a device mask when the token
// completes its chunk. `next_offset` receives (offset + 1) mod chunk_size. init.anchor must be given.
TitansLmmResult titans_lmm_static_step(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, const torch::Tensor& log_keep,
                                       const torch::Tensor& log_eta, const torch::Tensor& theta,
                                       const TitansMemoryState& init, const torch::Tensor& offset,
                                       torch::Tensor& next_offset, int64_t chunk_size, double inner_grad_clip = 0);

// Options of the LMM core (memory + its q/k/v paths + gates + learned initial memory).
struct LmmCoreOptions {
  int64_t d_in_model = 0;  // width of the stream the memory reads (d_model)
  int64_t heads = 0, head_dim = 0;
  int64_t memory_depth = 2, expansion = 4, chunk_size = 64;
  bool use_momentum = true, use_decay = true, use_conv = true;
  int64_t conv_size = 4;
  double alpha_bias = -6.0, eta_bias = 2.0, theta_bias = 0.0, theta_max = 0.1;
  double inner_grad_clip = 0;  // τ of the per-token gradient soft clamp (docs/models.md#titans-inner-gradient-clamp); 0 = off
  bool recurrent = false;  // full forwards token by token (same function)
  std::string key = "lmm";  // prefix of the state keys
};

// x [B, T, D] -> y [B, T, H, d_h]: q = l2norm(SiLU(Conv4(x W_Q))), k likewise, v = SiLU(Conv4(x W_V)),
// gates α = σ(x w_α + b_α), η = σ(x w_η + b_η), θ = θ_max σ(x w_θ + b_θ) (docs/models.md#titans), then the LMM kernel.
// With a state, continues from it (memory, momentum, anchor, offset, conv caches) and stores the new one.
struct LmmCoreImpl : torch::nn::Module, DeclaresNoWeightDecay {
  explicit LmmCoreImpl(const LmmCoreOptions& o);
  std::vector<std::string> no_weight_decay() const override;  // the learned initial memory
  // detach = false keeps the stored state differentiable (MAC's stateless full forward runs segment by segment
  // through a local state and must back-propagate across segments).
  torch::Tensor forward(const torch::Tensor& x, LayerState* state, bool detach = true);
  // The memory's query path on another stream (MAC: q(x) with its own conv cache `cache_key`).
  torch::Tensor query(const torch::Tensor& x, LayerState* state, const std::string& cache_key, bool detach = true);
  // The current memory weights of `state` (the learned initial memory when the state is fresh), [B, H, out, in].
  MemoryWeights current_weights(LayerState* state, int64_t batch, torch::ScalarType dt);

  LmmCoreOptions opt;
  DeepMemorySpec spec;
  HeadProjection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  torch::nn::Linear gate_proj{nullptr};  // 3H logits: α, η, θ
  std::vector<torch::Tensor> init_weights;  // learned M_0, [H, out, in]
};
TORCH_MODULE(LmmCore);

// Softmax attention of queries at positions qpos [Tq] over keys at kpos [Tk] (k, v: [B, H, Tk, D]):
// key j is visible iff kpos_j <= qpos_i and (window == 0 or kpos_j > qpos_i - window or kpos_j < always_before).
// q: [B, H, Tq, D]; blocked over queries (q_block); logits and softmax in fp32 (fp64 stays fp64).
struct TitansLmmArgs {
  int64_t num_heads = 0;     // 0: the model's n_heads
  int64_t head_dim = 0;      // d_k = d_v; 0: d_model / heads
  int64_t memory_depth = 2;  // L_M: 1 linear memory, 2 residual MLP (docs/models.md#titans)
  int64_t expansion = 4;     // MLP hidden = expansion · d_h (docs/models.md#deep-memory)
  int64_t chunk_size = 64;   // b: a model hyper-parameter for deep memories (docs/models.md#conventions)
  int64_t n_persistent = 4;  // N_p persistent tokens per layer (docs/models.md#titans)
  bool use_momentum = true;  // false: η ≡ 0 (Titans--)
  bool use_decay = true;     // false: α ≡ 0
  bool use_conv = true;      // Conv4 + SiLU on q, k, v
  int64_t conv_size = 4;
  double alpha_bias = -6.0;  // α = σ(x w_α + b_α) (docs/models.md#titans)
  double eta_bias = 2.0;     // η = σ(x w_η + b_η)
  double theta_bias = 0.0;   // θ = θ_max σ(x w_θ + b_θ)
  double theta_max = 0.1;
  // τ: per-token inner gradient g ← g·τ/max(τ, ||g||) (docs/models.md#titans-inner-gradient-clamp; 0 = off). On by default: with it
  // off, Titans gives NaN in its first forward at context 256 on real text (64-token chunks of anchor gradients,
  // amplified ~1/(1-η) by momentum, overshoot the inner loss's curvature; fp64 too). τ = 3, not 1: measured
  // (2026-11-25, d_model 64, context 256, 144 steps on Gutenberg) val ppl τ = 1 / 3 / 10: 8.35 / 8.49 / 9.25, and
  // the small MQAR of tests/test_titans.cpp best accuracy τ = 0 / 1 / 3 / 10: 0.119 / 0.070 / 0.100 / 0.119.
  double inner_grad_clip = 3.0;
  std::string form = "chunk";  // "chunk" | "recurrent" (same function; decode steps are recurrent)
};
#define TITANS_LMM_ARG_NAMES                                                                                \
  num_heads, head_dim, memory_depth, expansion, chunk_size, n_persistent, use_momentum, use_decay, use_conv, \
      conv_size, alpha_bias, eta_bias, theta_bias, theta_max, inner_grad_clip, form

}  // namespace mnemo
