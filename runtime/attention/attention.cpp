#include "runtime/attention/attention.h"

#include <cmath>

#include "core/torch_compat.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/precision.h"
#include "runtime/attention/fla_names.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"

namespace mnemo {

namespace {

torch::Tensor compute_dtype(const torch::Tensor& t) { return t.to(recurrence_dtype(t)); }

// Visibility mask [Tq, Tk] for absolute positions (true = visible).
torch::Tensor visibility(int64_t q_start, int64_t nq, int64_t k_start, int64_t nk, int64_t window,
                         const torch::Device& dev) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  auto qpos = torch::arange(q_start, q_start + nq, opts).unsqueeze(1);
  auto kpos = torch::arange(k_start, k_start + nk, opts).unsqueeze(0);
  auto mask = kpos <= qpos;
  if (window > 0) mask = mask & (kpos > qpos - window);
  return mask;
}

torch::Tensor masked_softmax_attention(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, const torch::Tensor& mask) {
  const AutocastOff autocast_off;  // scores, mask and softmax in fp32 under bf16 autocast (docs/models.md#linear-recurrent-families)
  auto qf = compute_dtype(q), kf = compute_dtype(k), vf = compute_dtype(v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto logits = torch::matmul(qf, kf.transpose(-1, -2)) * scale;
  logits = logits.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(logits, -1);  // subtracts the row max internally
  return torch::matmul(probs, vf).to(q.scalar_type());
}

}  // namespace

torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t q_offset, int64_t k_offset, int64_t window) {
  auto mask = visibility(q_offset, q.size(2), k_offset, k.size(2), window, q.device());
  return masked_softmax_attention(q, k, v, mask);
}

bool fused_attention_pays(std::initializer_list<torch::Tensor> q_then_keys_values) {
  if (!fused_cpu_eligible(q_then_keys_values)) return false;
  // The fused kernel runs one (batch, head) per task in the backward: with fewer of them than threads the
  // eager ops, which split every op over all threads, are the better choice.
  bool backward = false;
  for (const auto& t : q_then_keys_values) backward = backward || (t.defined() && t.requires_grad());
  const auto& q = *q_then_keys_values.begin();
  return !(backward && torch::GradMode::is_enabled()) || q.size(0) * q.size(1) >= at::get_num_threads();
}

torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                int64_t q_offset, int64_t k_offset, int64_t window, int64_t q_block) {
  const int64_t Tq = q.size(2), Tk = k.size(2);
  if (fused_attention_pays({q, k, v}) && fused_attention_supported(Tq, Tk, q_offset, k_offset, window))
    return fused_attention(q, k, v, q_offset, k_offset, window);
  return blocked_attention_eager(q, k, v, q_offset, k_offset, window, q_block);
}

torch::Tensor blocked_attention_eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      int64_t q_offset, int64_t k_offset, int64_t window, int64_t q_block) {
  const int64_t Tq = q.size(2), Tk = k.size(2);
#if MNEMO_HAS_SDPA
  // Fused kernel (flash / memory-efficient) for plain causal self-attention.
  if (window == 0 && q_offset == k_offset && Tq == Tk && q.scalar_type() != torch::kFloat64) {
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  }
#endif
  if (q_block <= 0) q_block = Tq;
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < Tq; s += q_block) {
    const int64_t e = std::min(Tq, s + q_block);
    const int64_t last_q = q_offset + e - 1, first_q = q_offset + s;
    int64_t hi = std::min(Tk, last_q - k_offset + 1);
    int64_t lo = window > 0 ? std::max<int64_t>(0, first_q - window + 1 - k_offset) : 0;
    hi = std::max(hi, lo);
    auto qb = q.slice(2, s, e);
    auto kb = k.slice(2, lo, hi), vb = v.slice(2, lo, hi);
    auto mask = visibility(first_q, e - s, k_offset + lo, hi - lo, window, q.device());
    outs.push_back(masked_softmax_attention(qb, kb, vb, mask));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 2);
}

AttentionMixer::AttentionMixer(const MixerContext& ctx, const AttentionArgs& args) : args_(args) {
  n_heads_ = ctx.n_heads;
  n_kv_heads_ = args.n_kv_heads > 0 ? args.n_kv_heads : ctx.n_heads;
  if (n_heads_ % n_kv_heads_ != 0)
    throw Error("n_heads (" + std::to_string(n_heads_) + ") must be a multiple of n_kv_heads (" +
                std::to_string(n_kv_heads_) + ")");
  if (args.window < 0) throw Error("window must be >= 0, got " + std::to_string(args.window));
  head_dim_ = ctx.d_model / ctx.n_heads;
  q_proj_ = register_module("q_proj", make_linear(ctx.d_model, n_heads_ * head_dim_));
  k_proj_ = register_module("k_proj", make_linear(ctx.d_model, n_kv_heads_ * head_dim_));
  v_proj_ = register_module("v_proj", make_linear(ctx.d_model, n_kv_heads_ * head_dim_));
  o_proj_ = register_module("o_proj", make_linear(n_heads_ * head_dim_, ctx.d_model));
  if (args.short_conv) {
    if (args.conv_size < 1) throw Error("conv_size must be >= 1, got " + std::to_string(args.conv_size));
    q_conv_ = register_module("q_conv", ShortConv(n_heads_ * head_dim_, args.conv_size));
    k_conv_ = register_module("k_conv", ShortConv(n_kv_heads_ * head_dim_, args.conv_size));
    v_conv_ = register_module("v_conv", ShortConv(n_kv_heads_ * head_dim_, args.conv_size));
  }
}

std::pair<torch::Tensor, torch::Tensor> AttentionMixer::extend_cache(const torch::Tensor& k,
                                                                     const torch::Tensor& v,
                                                                     LayerState* state,
                                                                     int64_t& k_offset) {
  const int64_t p = state->pos, T = k.size(2);
  if (args_.window == 0) {  // growing KV cache [B, Hkv, p, D]
    torch::Tensor keys = k, values = v;
    if (state->has("k")) {
      keys = torch::cat({state->at("k"), k}, 2);
      values = torch::cat({state->at("v"), v}, 2);
    }
    state->tensors["k"] = keys.detach();
    state->tensors["v"] = values.detach();
    k_offset = 0;
    return {keys, values};
  }
  // Sliding window: ring buffer of W slots; position t lives in slot t % W.
  const int64_t W = args_.window;
  if (!state->has("k_ring")) {
    auto shape = std::vector<int64_t>{k.size(0), k.size(1), W, k.size(3)};
    state->tensors["k_ring"] = torch::zeros(shape, k.options());
    state->tensors["v_ring"] = torch::zeros(shape, v.options());
  }
  auto& kr = state->at("k_ring");
  auto& vr = state->at("v_ring");
  const int64_t n_cached = std::min(p, W);
  auto idx_opts = torch::TensorOptions().dtype(torch::kInt64).device(k.device());
  auto cached_idx = torch::arange(p - n_cached, p, idx_opts).remainder(W);
  auto keys = torch::cat({kr.index_select(2, cached_idx), k}, 2);
  auto values = torch::cat({vr.index_select(2, cached_idx), v}, 2);
  k_offset = p - n_cached;
  // Write the newest min(T, W) tokens into their slots.
  const int64_t n_new = std::min(T, W);
  auto new_idx = torch::arange(p + T - n_new, p + T, idx_opts).remainder(W);
  kr = kr.index_copy(2, new_idx, k.slice(2, T - n_new, T).detach());
  vr = vr.index_copy(2, new_idx, v.slice(2, T - n_new, T).detach());
  return {keys, values};
}

torch::Tensor AttentionMixer::forward(const torch::Tensor& x, LayerState* state) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t offset = state ? state->pos : 0;
  auto q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);  // [B, T, H * D]
  if (args_.short_conv) {
    q = q_conv_(q, state, "conv_q");
    k = k_conv_(k, state, "conv_k");
    v = v_conv_(v, state, "conv_v");
  }
  q = q.view({B, T, n_heads_, head_dim_}).transpose(1, 2);
  k = k.view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  v = v.view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  if (args_.rope) {
    q = apply_rope(q, offset, args_.rope_theta);
    k = apply_rope(k, offset, args_.rope_theta);
  }
  int64_t k_offset = offset;
  if (state) std::tie(k, v) = extend_cache(k, v, state, k_offset);
  if (n_kv_heads_ != n_heads_) {
    k = k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    v = v.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  }
  auto y = blocked_attention(q, k, v, offset, k_offset, args_.window, args_.q_block);
  return o_proj_(y.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_}));
}

bool AttentionMixer::packs_sequences(const torch::Tensor& x) const { return packed_forms_enabled(x, true); }

torch::Tensor AttentionMixer::forward_packed(const torch::Tensor& x, const PackedSequences& seqs) {
  const int64_t N = x.size(1);
  auto q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);  // [1, N, H * D]
  if (args_.short_conv) {
    q = q_conv_->forward_packed(q, seqs);
    k = k_conv_->forward_packed(k, seqs);
    v = v_conv_->forward_packed(v, seqs);
  }
  q = q.view({N, -1}), k = k.view({N, -1}), v = v.view({N, -1});
  std::vector<torch::Tensor> parts;
  for (const auto& b : seqs.buckets) {
    auto heads = [&](const torch::Tensor& t, int64_t h) {  // [rows, h, length, D], every row from position 0
      return padded_rows(t, b).view({b.rows, b.length, h, head_dim_}).transpose(1, 2);
    };
    auto qb = heads(q, n_heads_), kb = heads(k, n_kv_heads_), vb = heads(v, n_kv_heads_);
    if (args_.rope) {
      qb = apply_rope(qb, 0, args_.rope_theta);
      kb = apply_rope(kb, 0, args_.rope_theta);
    }
    if (n_kv_heads_ != n_heads_) {
      kb = kb.repeat_interleave(n_heads_ / n_kv_heads_, 1);
      vb = vb.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    }
    auto y = blocked_attention(qb, kb, vb, 0, 0, args_.window, args_.q_block);  // [rows, H, length, D]
    parts.push_back(unpad_rows(y.transpose(1, 2).reshape({b.rows, b.length, n_heads_ * head_dim_}), b));
  }
  return o_proj_(unbucket_rows(parts, seqs).view({1, N, n_heads_ * head_dim_}));
}

namespace {
// The families' user-facing args (flat config keys); both map onto AttentionArgs.
struct TransformerArgs {
  int64_t n_kv_heads = 0;
  double rope_theta = 10000.0;
  int64_t q_block = 256;
  bool short_conv = false;
  int64_t conv_size = 4;
  bool use_rope = true;  // false: NoPE
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TransformerArgs, n_kv_heads, rope_theta, q_block, short_conv,
                                                conv_size, use_rope)

struct SwaArgs {
  int64_t window = 2048;  // docs/models.md#sliding-window-attention default for hybrids at 4K context
  int64_t n_kv_heads = 0;
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SwaArgs, window, n_kv_heads, rope_theta, q_block)

class TransformerMixer : public AttentionMixer {
 public:
  TransformerMixer(const MixerContext& ctx, const TransformerArgs& a)
      : AttentionMixer(ctx, AttentionArgs{0, a.n_kv_heads, a.rope_theta, a.q_block, a.short_conv, a.conv_size,
                                                 a.use_rope}) {}
};

class SwaMixer : public AttentionMixer {
 public:
  SwaMixer(const MixerContext& ctx, const SwaArgs& a)
      : AttentionMixer(ctx, AttentionArgs{a.window, a.n_kv_heads, a.rope_theta, a.q_block}) {
    if (a.window <= 0) throw Error("swa: window must be > 0, got " + std::to_string(a.window));
  }
};
}  // namespace

void register_attention_families(Registry& r) {
  r.add_mixer(make_mixer_family<TransformerArgs, TransformerMixer>(
      "transformer", "Transformer++: causal softmax attention, RoPE, optional GQA, optional short conv on q/k/v (docs/models.md#transformer)",
      {attention_flops, {"attention", "black"}, 4e-3, {attention_fla_names()},
       {{"use_rope", "false: no positional encoding in these layers (NoPE), as Kimi Linear's global attention layers "
                     "(arXiv 2510.26692)"}}}));
  r.add_mixer(make_mixer_family<SwaArgs, SwaMixer>(
      "swa", "sliding-window softmax attention, W keys incl. self, ring-buffer cache (docs/models.md#sliding-window-attention)",
      {attention_flops, {"attention", "grey"}}));
}

}  // namespace mnemo
