// `retnet` mixer (docs/models.md#retnet, fla MultiScaleRetention defaults): q, k, v plain
// projections (optional Conv4 + SiLU), RoPE on q and k, fixed decays γ_h = 1 − 2^(−5−h),
// S_t = γ_h S_{t-1} + k_tᵀ v_t, o_t = q̃_t S_t (q̃ = d_k^-1/2 q); out = W_o(RMSNorm(o) ⊙ SiLU(x W_g)).
// Decode state: "memory" [B, H, K, V] (fp32; fp64 for fp64 modules) + conv caches when enabled;
// RoPE positions continue from LayerState::pos.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/gla/gla.h"
#include "runtime/kernels/precision.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"
#include "runtime/retnet/fla_names.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

struct RetNetArgs {
  int64_t chunk_size = 64;
  std::string form = "chunk";  // "chunk" | "recurrent"
  double expand_k = 1.0;
  double expand_v = 2.0;
  bool short_conv = false;
  int64_t conv_size = 4;
  bool retnet_rope = true;  // rotate-half RoPE on q and k (fla default)
  double rope_theta = 10000.0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RetNetArgs, chunk_size, form, expand_k, expand_v,
                                                short_conv, conv_size, retnet_rope, rope_theta)

class RetNetMixer : public Mixer {
 public:
  RetNetMixer(const MixerContext& ctx, const RetNetArgs& args) : args_(args) {
    check_kernel_form("retnet", args.form, args.chunk_size);
    if (args.short_conv && args.conv_size < 1)
      throw Error("retnet: conv_size must be >= 1, got " + std::to_string(args.conv_size));
    const int64_t H = ctx.n_heads;
    dk_ = expanded_head_dim("retnet", "expand_k", ctx.d_model, args.expand_k, H);
    dv_ = expanded_head_dim("retnet", "expand_v", ctx.d_model, args.expand_v, H);
    if (args.retnet_rope && dk_ % 2 != 0)
      throw Error("retnet: RoPE needs an even key head dim, got " + std::to_string(dk_) +
                  " (set expand_k or retnet_rope = false)");
    HeadProjectionOptions o;
    o.d_model = ctx.d_model;
    o.n_heads = H;
    o.short_conv = args.short_conv;
    o.conv_size = args.conv_size;
    o.silu = false;  // plain projections unless the short conv is on
    o.head_dim = dk_;
    q_ = register_module("q", HeadProjection(o, "q"));
    k_ = register_module("k", HeadProjection(o, "k"));
    o.head_dim = dv_;
    v_ = register_module("v", HeadProjection(o, "v"));
    out_ = register_module("out", GatedOutput(ctx.d_model, H, dv_));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    auto q = q_(x, state), k = k_(x, state), v = v_(x, state);  // [B, T, H, D]
    if (args_.retnet_rope) {
      const int64_t offset = state ? state->pos : 0;
      q = apply_rope(q.transpose(1, 2), offset, args_.rope_theta).transpose(1, 2);
      k = apply_rope(k.transpose(1, 2), offset, args_.rope_theta).transpose(1, 2);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto s0 = state_or_empty(state, "memory");
    RecurrentResult r;
    if (!use_chunked_kernel(args_.form, state, x.size(1))) {
      r = retention_recurrent(q, k, v, scale, s0);
    } else if (gla_chunk_route(q) == GlaChunkRoute::kFusedKernel) {
      // On a GPU: the family's fused kernel with the scalar gate g_t = ln γ_h for every token.
      const int64_t B = q.size(0), T = q.size(1), H = q.size(2);
      auto g = retnet_log_decay(H, q.options().dtype(recurrence_dtype(q))).view({1, 1, H}).expand({B, T, H});
      r = gla_chunk_fused(q, k, v, g, GlaGate::kScalar, scale, s0, args_.chunk_size);
    } else {
      r = retention_chunk(q, k, v, scale, s0, args_.chunk_size);
    }
    if (state) state->tensors["memory"] = r.final_state.detach();
    return out_(r.o, x);
  }

  // Packed sequences: RoPE from each document's own start and GLA's fused kernel with cu_seqlens
  // (docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, gla_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto q = q_->forward_packed(x, seqs), k = k_->forward_packed(x, seqs), v = v_->forward_packed(x, seqs);
    if (args_.retnet_rope) {
      q = apply_rope_packed(q, seqs, args_.rope_theta);
      k = apply_rope_packed(k, seqs, args_.rope_theta);
    }
    const int64_t N = q.size(1), H = q.size(2);
    auto g = retnet_log_decay(H, q.options().dtype(recurrence_dtype(q))).view({1, 1, H}).expand({1, N, H});
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto r = gla_chunk_fused(q, k, v, g, GlaGate::kScalar, scale, {}, args_.chunk_size, seqs.cu_seqlens);
    return out_(r.o, x);
  }

 private:
  RetNetArgs args_;
  int64_t dk_ = 0, dv_ = 0;
  HeadProjection q_{nullptr}, k_{nullptr}, v_{nullptr};
  GatedOutput out_{nullptr};
};

void register_retnet_family(Registry& r) {
  r.add_mixer(make_mixer_family<RetNetArgs, RetNetMixer>(
      "retnet", "RetNet retention, fixed decay 1-2^(-5-h), RoPE q/k, gated RMSNorm (docs/models.md#retnet)",
      {chunked_recurrence_flops, {"linear recurrent", "brown"}, 2e-3, {retnet_fla_names()},
       {{"retnet_rope", "rotate-half RoPE on q and k (fla's default); needs an even key width"}}}));
}

}  // namespace mnemo
