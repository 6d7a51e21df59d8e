// Softmax attention mixers (docs/models.md#transformer): `transformer` (causal, RoPE, optional GQA) and
// `swa` (sliding window of W keys including the current token; decode cache = ring buffer of W).
// Either may put a short convolution on q, k, v (`short_conv`; decode caches "conv_q", "conv_k", "conv_v").
#pragma once
#include <torch/torch.h>

#include "runtime/layers.h"
#include "runtime/mixer.h"

namespace mnemo {

struct AttentionArgs {
  int64_t window = 0;        // 0 = full causal attention; W > 0 = keys (t-W, t]
  int64_t n_kv_heads = 0;    // 0 = n_heads (no GQA)
  double rope_theta = 10000.0;
  int64_t q_block = 256;     // queries per block: memory O(T * block) (full) or O(block * (block+W))
  // Depthwise causal conv (kernel conv_size) + SiLU on q, k, v after their projections, as the linear
  // recurrent families have it (docs/models.md#shared-building-blocks). Off for Transformer++; Zoology's MQAR attention baseline has a
  // short convolution before attention (Hybrid[BaseConv, MHA], arxiv24_based_figure2/configs.py).
  bool short_conv = false;
  int64_t conv_size = 4;
  bool rope = true;  // false: no positional encoding (NoPE), as Kimi Linear's global attention layers
};

// Causal (optionally windowed) softmax attention over absolute positions, blocked over queries.
// q: [B, H, Tq, D], k/v: [B, H, Tk, D]; query i sits at position q_offset + i, key j at
// k_offset + j; key j is visible to query i iff kpos <= qpos and (window == 0 or kpos > qpos - W).
// Logits and softmax in fp32 (fp64 stays fp64), row-max subtraction. On the CPU (fp32/fp64, autocast off, every
// query sees a key) the fused kernel (runtime/kernels/fused_cpu.h; q_block does not apply), else
// blocked_attention_eager.
torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                int64_t q_offset, int64_t k_offset, int64_t window, int64_t q_block);
// Whether the fused CPU attention (fused_cpu.h) takes these [B, H, T, D] inputs, q first, and is the better choice:
// eligible, and either no backward or at least as many (batch, head) pairs as threads.
bool fused_attention_pays(std::initializer_list<torch::Tensor> q_then_keys_values);
// The eager path: SDPA for plain causal attention on LibTorch >= 2.1, else q_block queries at a time.
torch::Tensor blocked_attention_eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      int64_t q_offset, int64_t k_offset, int64_t window, int64_t q_block);

// Reference: materialise the full [Tq, Tk] mask (tests only).
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t q_offset, int64_t k_offset, int64_t window);

class AttentionMixer : public Mixer {
 public:
  AttentionMixer(const MixerContext& ctx, const AttentionArgs& args);
  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override;
  // Packed sequences (docs/models.md#packed-sequences): projections, short convs and the output over the packed
  // row, the attention itself over each length group's right-padded rows. Taken on CUDA tensors, where it lets a
  // hybrid's recurrent layers run their kernels on the packed row.
  bool packs_sequences(const torch::Tensor& x) const override;
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override;

 private:
  // Keys/values of the cache in chronological order + the new ones; updates the cache.
  std::pair<torch::Tensor, torch::Tensor> extend_cache(const torch::Tensor& k, const torch::Tensor& v,
                                                       LayerState* state, int64_t& k_offset);
  AttentionArgs args_;
  int64_t n_heads_, n_kv_heads_, head_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  ShortConv q_conv_{nullptr}, k_conv_{nullptr}, v_conv_{nullptr};  // null unless args.short_conv
};

}  // namespace mnemo
