// Titans hybrid blocks MAC (docs/models.md#titans-mac) and MAG (docs/models.md#titans-mag), parameterised by the memory branch so that the
// Titans LMM (titans_mac, titans_mag) and the ATLAS memory (atlas_mac, atlas_mag; §7.9) share one implementation.
// A concrete mixer registers its memory module first (as "core"), then calls build_mac / build_mag, which register
// "persistent" (N_p > 0), "q_proj", "k_proj", "v_proj", "norm_attn", "norm_mem", "o_proj" in this order (the
// parameter names and the initialisation order of the original titans_mac / titans_mag).
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/deep_memory/memory.h"
#include "runtime/layers.h"
#include "runtime/mixer.h"
#include "runtime/no_weight_decay.h"

namespace mnemo {

struct HybridAttnOptions {
  std::string family;          // for error messages
  int64_t n_persistent = 4;    // N_p (docs/models.md#titans)
  int64_t memory_width = 0;    // memory heads × head_dim; must equal d_model (the branches combine element-wise)
  double rope_theta = 10000.0;
  int64_t q_block = 256;
  int64_t segment_size = 512;  // MAC: C, a multiple of chunk_size
  int64_t chunk_size = 64;     // MAC: the memory chunk b
  int64_t window = 2048;       // MAG: SWA window W
};

// Shared parts: persistent tokens, attention projections, the ⊗ output o = W_o(RMSNorm_a(y) ⊙ σ(RMSNorm_b(m))).
class HybridAttnMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  std::vector<std::string> no_weight_decay() const override {
    return n_p_ > 0 ? std::vector<std::string>{"persistent"} : std::vector<std::string>{};
  }

 protected:
  // Validates the head layout (call before registering the memory module), then, once the memory is registered,
  // registers the attention parameters (build).
  void check_layout(const MixerContext& ctx, const HybridAttnOptions& o);
  void build(const MixerContext& ctx);
  // [B, n, D] -> [B, H, n, d_h] with RoPE at positions offset.. (no RoPE for values)
  torch::Tensor heads(torch::nn::Linear& p, const torch::Tensor& in, int64_t offset, bool rope);
  torch::Tensor persistent_prefix(int64_t batch, torch::ScalarType dt);  // [B, N_p, D]
  torch::Tensor combine(const torch::Tensor& y, const torch::Tensor& m);  // W_o(RMSNorm_a(y) ⊙ σ(RMSNorm_b(m)))

  HybridAttnOptions hopt_;
  int64_t n_p_ = 0, heads_ = 0, dh_ = 0;
  torch::Tensor persistent_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  RMSNorm norm_a_{nullptr}, norm_b_{nullptr};
};

// MAC (docs/models.md#titans-mac with its causality fix), per segment of C tokens aligned to absolute positions:
//   1. h_j = M_{t-1}(q(x_j))  (memory after the previous segment; q = the memory's query path, own conv cache)
//   2. y = Attn over [P | h | S]: query i sees all of P and h_j, S_j for j <= i; RoPE P at 0..N_p-1, h_j, S_j at N_p + j
//   3. the memory absorbs the segment with k(y), v(y), gates(y) (continuing from M_{t-1}, b | C)
//   4. o_i = W_o( RMSNorm_a(y_i) ⊙ σ(RMSNorm_b(M_i(q(y_i)))) )
// Decode state: "mac_hk", "mac_hv", "mac_xk", "mac_xv" (the current segment's keys/values), "mac_seg_w*" (memory
// at the segment start), "mac_pos", the memory's own state and its q(x) conv cache "conv_qx".
class MacMixerBase : public HybridAttnMixer {
 public:
  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override;

 protected:
  void check_mac(const MixerContext& ctx, const HybridAttnOptions& o);  // + segment_size % chunk_size == 0
  // The memory branch. detach = false keeps every stored tensor differentiable (the stateless forward runs
  // segment by segment through a local state and back-propagates across segments).
  virtual size_t memory_num_weights() const = 0;
  // current memory weights (the learned initial memory when fresh), each [B, H, out, in], dtype dt
  virtual MemoryWeights memory_weights(LayerState* st, int64_t batch, torch::ScalarType dt) = 0;
  // h = M_w(q(x)) through the query path with conv cache `cache_key`: [B, n, D] in x's dtype
  virtual torch::Tensor memory_read(const MemoryWeights& w, const torch::Tensor& x, LayerState* st,
                                    const std::string& cache_key, bool detach) = 0;
  // absorb y (read after write): per-token read-outs M_i(q(y_i)), [B, n, D] in y's dtype
  virtual torch::Tensor memory_absorb(const torch::Tensor& y, LayerState* st, bool detach) = 0;
};

// MAG (docs/models.md#titans-mag): x̃ = [P] || x; y = SW-Attn*(x̃) (window W, prefix always visible); m = Memory(x̃);
//   o = W_o( RMSNorm_a(y) ⊙ σ(RMSNorm_b(m)) ), prefix positions dropped.
// RoPE: prefix at 0..N_p-1, token t at N_p + t. Decode state: the memory's state, "mag_pk"/"mag_pv" (prefix
// keys/values), "mag_wk"/"mag_wv" (the last <= W keys/values), "mag_pos".
class MagMixerBase : public HybridAttnMixer {
 public:
  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override;

 protected:
  void check_mag(const MixerContext& ctx, const HybridAttnOptions& o);  // + window >= 1
  virtual bool memory_fresh(LayerState* st) const = 0;  // no memory state yet (first call of a request)
  // per-token memory read-outs over x̃ (continuing the state): [B, T', D] in x's dtype
  virtual torch::Tensor memory_branch(const torch::Tensor& x, LayerState* st) = 0;
};

}  // namespace mnemo
