// `gla` mixer (docs/models.md#gla, fla GatedLinearAttention defaults): q, k, v plain projections
// (optional Conv4 + SiLU), key-wise log decay gk = logsigmoid((x W_1) W_2 + b) / 16 (rank 16),
// S_t = Diag(e^{gk_t}) S_{t-1} + k_tᵀ v_t, o_t = q̃_t S_t (q̃ = d_k^-1/2 q);
// out = W_o(RMSNorm(o) ⊙ SiLU(x W_g)). Decode state: "memory" [B, H, K, V] (fp32; fp64 for fp64
// modules) + conv caches when enabled.
#include <cmath>

#include "runtime/gla/gla.h"
#include "runtime/blocks/mixer_common.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/gla/fla_names.h"
#include "runtime/registry.h"

namespace mnemo {

struct GlaArgs {
  int64_t chunk_size = 32;     // docs/models.md#gla: C = 16–32 on CPU
  std::string form = "chunk";  // "chunk" | "recurrent"
  double expand_k = 0.5;
  double expand_v = 1.0;
  bool short_conv = false;
  int64_t conv_size = 4;
  int64_t gla_gate_rank = 16;         // low rank of the decay projection
  double gla_gate_normalizer = 16.0;  // log a = logsigmoid(·) / normalizer
  int64_t gla_sub_chunk = 16;         // secondary chunking of the intra-chunk matrix
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GlaArgs, chunk_size, form, expand_k, expand_v, short_conv,
                                                conv_size, gla_gate_rank, gla_gate_normalizer,
                                                gla_sub_chunk)

class GlaMixer : public Mixer {
 public:
  GlaMixer(const MixerContext& ctx, const GlaArgs& args) : args_(args) {
    check_kernel_form("gla", args.form, args.chunk_size);
    if (args.short_conv && args.conv_size < 1)
      throw Error("gla: conv_size must be >= 1, got " + std::to_string(args.conv_size));
    if (args.gla_gate_rank < 1)
      throw Error("gla: gla_gate_rank must be >= 1, got " + std::to_string(args.gla_gate_rank));
    if (!(args.gla_gate_normalizer > 0))
      throw Error("gla: gla_gate_normalizer must be > 0, got " + std::to_string(args.gla_gate_normalizer));
    if (args.gla_sub_chunk < 1)
      throw Error("gla: gla_sub_chunk must be >= 1, got " + std::to_string(args.gla_sub_chunk));
    H_ = ctx.n_heads;
    dk_ = expanded_head_dim("gla", "expand_k", ctx.d_model, args.expand_k, H_);
    dv_ = expanded_head_dim("gla", "expand_v", ctx.d_model, args.expand_v, H_);
    HeadProjectionOptions o;
    o.d_model = ctx.d_model;
    o.n_heads = H_;
    o.short_conv = args.short_conv;
    o.conv_size = args.conv_size;
    o.silu = false;  // plain projections unless the short conv is on
    o.head_dim = dk_;
    q_ = register_module("q", HeadProjection(o, "q"));
    k_ = register_module("k", HeadProjection(o, "k"));
    o.head_dim = dv_;
    v_ = register_module("v", HeadProjection(o, "v"));
    gate_down_ = register_module("gate_down", make_linear(ctx.d_model, args.gla_gate_rank));
    gate_up_ = register_module("gate_up", make_linear(args.gla_gate_rank, H_ * dk_, /*bias=*/true));
    out_ = register_module("out", GatedOutput(ctx.d_model, H_, dv_));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_(x, state), k = k_(x, state), v = v_(x, state);
    // log-space gate from logits (docs/models.md#shared-building-blocks, docs/models.md#numerical-stability rule 2), in the recurrence precision.
    auto logits = gate_up_(gate_down_(x)).view({B, T, H_, dk_});
    auto gk = torch::log_sigmoid(logits.to(recurrence_dtype(x))) / args_.gla_gate_normalizer;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto s0 = state_or_empty(state, "memory");
    // On a GPU the chunk form is the fused kernel (chunk_kernel.cuh); on the CPU the eager form stays the default.
    auto r = !use_chunked_kernel(args_.form, state, T) ? gla_recurrent(q, k, v, gk, scale, s0)
             : gla_chunk_route(q) == GlaChunkRoute::kFusedKernel
                 ? gla_chunk_fused(q, k, v, gk, GlaGate::kKeyWise, scale, s0, args_.chunk_size)
                 : gla_chunk(q, k, v, gk, scale, s0, args_.chunk_size, args_.gla_sub_chunk);
    if (state) state->tensors["memory"] = r.final_state.detach();
    return out_(r.o, x);
  }

  // Decode: the conv caches and the recurrent state, fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  // Packed sequences: the fused chunk form with cu_seqlens (the CUDA kernel on a GPU, docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, gla_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto q = q_->forward_packed(x, seqs), k = k_->forward_packed(x, seqs), v = v_->forward_packed(x, seqs);
    auto logits = gate_up_(gate_down_(x)).view({1, x.size(1), H_, dk_});
    auto gk = torch::log_sigmoid(logits.to(recurrence_dtype(x))) / args_.gla_gate_normalizer;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto r = gla_chunk_fused(q, k, v, gk, GlaGate::kKeyWise, scale, {}, args_.chunk_size, seqs.cu_seqlens);
    return out_(r.o, x);
  }

 private:
  GlaArgs args_;
  int64_t H_ = 0, dk_ = 0, dv_ = 0;
  HeadProjection q_{nullptr}, k_{nullptr}, v_{nullptr};
  torch::nn::Linear gate_down_{nullptr}, gate_up_{nullptr};
  GatedOutput out_{nullptr};
};

void register_gla_family(Registry& r) {
  r.add_mixer(make_mixer_family<GlaArgs, GlaMixer>(
      "gla", "gated linear attention, key-wise low-rank logsigmoid decay, gated RMSNorm (docs/models.md#gla)",
      {chunked_recurrence_flops, {"linear recurrent", "pink"}, 2e-3, {gla_fla_names()},
       {{"gla_gate_rank", "rank of the low-rank projection of the key-wise decay"},
        {"gla_gate_normalizer", "log decay = logsigmoid(x W) / gla_gate_normalizer"},
        {"gla_sub_chunk", "rows per block of the intra-chunk decayed score matrix (numerics and speed only)"}}}));
}

}  // namespace mnemo
