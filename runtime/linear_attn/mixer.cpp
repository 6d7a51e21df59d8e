// `linear_attn` mixer (docs/models.md#linear-attention): q, k, v = SiLU(Conv4(x W)) per head (no l2norm),
// o_t = q̃_t S_t with S_t = S_{t-1} + k_tᵀ v_t, q̃ = d_k^-1/2 q; out = W_o(RMSNorm(o) ⊙ SiLU(x W_g)).
// Optional Katharopoulos normaliser (la_normalize): q, k -> elu(·)+1 > 0 and
// o_t = q̃_t S_t / (q̃_t · z_t + 1e-10), z_t = Σ k.
// Decode state: "memory" [B, H, K, V] (+ "memory_z" [B, H, K]) in fp32 (fp64 for fp64 modules),
// plus the conv caches "conv_q", "conv_k", "conv_v".
#include <cmath>

#include "runtime/linear_attn/linear_attn.h"
#include "runtime/gla/gla.h"
#include "runtime/kernels/precision.h"
#include "runtime/blocks/mixer_common.h"
#include "runtime/recurrent_block.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"

namespace mnemo {

struct LinearAttnArgs {
  int64_t chunk_size = 64;
  std::string form = "chunk";  // "chunk" | "recurrent"
  double expand_k = 1.0;
  double expand_v = 1.0;
  bool short_conv = true;
  int64_t conv_size = 4;
  bool la_normalize = false;  // Katharopoulos denominator (off by default, docs/models.md#linear-attention)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LinearAttnArgs, chunk_size, form, expand_k, expand_v,
                                                short_conv, conv_size, la_normalize)

// The same mixer as Katharopoulos et al. (2020) define linear attention: positive features φ = elu + 1 and the
// normaliser on. The papers cite this paper for their linear-attention rows; MoM and Lattice write the identity form
// without the denominator (docs/models.md#linear-attention), which is `linear_attn`.
struct LinearAttnEluArgs : LinearAttnArgs {
  LinearAttnEluArgs() { la_normalize = true; }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LinearAttnEluArgs, chunk_size, form, expand_k, expand_v,
                                                short_conv, conv_size, la_normalize)

class LinearAttnMixer : public Mixer {
 public:
  LinearAttnMixer(const MixerContext& ctx, const LinearAttnArgs& args) : args_(args) {
    check_kernel_form("linear_attn", args.form, args.chunk_size);
    if (args.short_conv && args.conv_size < 1)
      throw Error("linear_attn: conv_size must be >= 1, got " + std::to_string(args.conv_size));
    const int64_t H = ctx.n_heads;
    dk_ = expanded_head_dim("linear_attn", "expand_k", ctx.d_model, args.expand_k, H);
    dv_ = expanded_head_dim("linear_attn", "expand_v", ctx.d_model, args.expand_v, H);
    HeadProjectionOptions o;
    o.d_model = ctx.d_model;
    o.n_heads = H;
    o.short_conv = args.short_conv;
    o.conv_size = args.conv_size;
    o.silu = true;
    o.head_dim = dk_;
    q_ = register_module("q", HeadProjection(o, "q"));
    k_ = register_module("k", HeadProjection(o, "k"));
    o.head_dim = dv_;
    v_ = register_module("v", HeadProjection(o, "v"));
    out_ = register_module("out", GatedOutput(ctx.d_model, H, dv_));
  }

  // Decode: the conv caches, the recurrent state and its normaliser: fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    auto q = q_(x, state), k = k_(x, state), v = v_(x, state);
    if (args_.la_normalize) {  // positive features so that q · z > 0
      q = torch::elu(q) + 1.0;
      k = torch::elu(k) + 1.0;
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto s0 = state_or_empty(state, "memory");
    auto z0 = state_or_empty(state, "memory_z");
    LinearAttnResult r;
    if (!use_chunked_kernel(args_.form, state, x.size(1)))
      r = linear_attn_recurrent(q, k, v, scale, s0, args_.la_normalize, z0);
    else if (gla_chunk_route(q) == GlaChunkRoute::kFusedKernel)
      r = fused_chunk(q, k, v, scale, s0, z0);
    else
      r = linear_attn_chunk(q, k, v, scale, s0, args_.chunk_size, args_.la_normalize, z0);
    if (state) {
      state->tensors["memory"] = r.final_state.detach();
      if (args_.la_normalize) state->tensors["memory_z"] = r.final_z.detach();
    }
    return out_(r.o, x);
  }

  // Packed sequences: the fused kernel with cu_seqlens, the short convs restarting at each document
  // (docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, gla_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto q = q_->forward_packed(x, seqs), k = k_->forward_packed(x, seqs), v = v_->forward_packed(x, seqs);
    if (args_.la_normalize) {
      q = torch::elu(q) + 1.0;
      k = torch::elu(k) + 1.0;
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    return out_(fused_chunk(q, k, v, scale, {}, {}, seqs.cu_seqlens).o, x);
  }

 private:
  // On a GPU: the gated-linear-attention family's fused kernel without a gate. The normaliser z rides along as an
  // extra value column of ones, as in linear_attn_chunk: [S | z] is read and written like S.
  LinearAttnResult fused_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                               const torch::Tensor& s0, const torch::Tensor& z0,
                               const torch::Tensor& cu_seqlens = {}) const {
    const int64_t V = v.size(3);
    if (!args_.la_normalize) {
      auto r = gla_chunk_fused(q, k, v, {}, GlaGate::kNone, scale, s0, args_.chunk_size, cu_seqlens);
      return {r.o, r.final_state, {}};
    }
    auto v1 = torch::cat({v, torch::ones_like(v.narrow(-1, 0, 1))}, -1);
    torch::Tensor s1;
    if (s0.defined() || z0.defined()) {
      const auto dt = recurrence_dtype(q);
      const int64_t B = q.size(0), H = q.size(2), K = q.size(3);
      auto S = s0.defined() ? s0.to(dt) : torch::zeros({B, H, K, V}, q.options().dtype(dt));
      auto z = z0.defined() ? z0.to(dt) : torch::zeros({B, H, K}, q.options().dtype(dt));
      s1 = torch::cat({S, z.unsqueeze(-1)}, -1);
    }
    auto r = gla_chunk_fused(q, k, v1, {}, GlaGate::kNone, scale, s1, args_.chunk_size, cu_seqlens);
    auto num = r.o.narrow(-1, 0, V), den = r.o.narrow(-1, V, 1);
    return {(num / (den + kLinearAttnDenominatorEps)).to(q.scalar_type()), r.final_state.narrow(-1, 0, V),
            r.final_state.select(-1, V)};
  }

  LinearAttnArgs args_;
  int64_t dk_ = 0, dv_ = 0;
  HeadProjection q_{nullptr}, k_{nullptr}, v_{nullptr};
  GatedOutput out_{nullptr};
};

void register_linear_attn_family(Registry& r) {
  r.add_mixer(make_mixer_family<LinearAttnArgs, LinearAttnMixer>(
      "linear_attn", "linear attention S_t = S_{t-1} + k v^T, Conv4+SiLU q/k/v, gated RMSNorm (docs/models.md#linear-attention)",
      {chunked_recurrence_flops, {"linear recurrent", "olive"}}));
  r.add_mixer(make_mixer_family<LinearAttnEluArgs, LinearAttnMixer>(
      "linear_attn_elu",
      "linear attention as Katharopoulos et al. 2020: phi = elu + 1 on q, k and o_t = q S_t / (q . z_t), z_t = sum k "
      "(linear_attn with la_normalize = true, docs/models.md#linear-attention)",
      {chunked_recurrence_flops, {"linear recurrent", "orange"}, 3.2e-2}));
}

}  // namespace mnemo
