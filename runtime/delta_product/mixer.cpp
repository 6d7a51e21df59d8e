// `gated_deltaproduct` mixer: Gated DeltaProduct (docs/models.md#gated-deltaproduct; arXiv 2502.10297 §3, with
// flash-linear-attention's GatedDeltaProduct layer for the parameterisation). Per token, n_h keys, values and betas:
//   q = l2norm(SiLU(Conv4(x W_q)))                       [B, T, H, d_k]
//   k_j = l2norm(SiLU(Conv4(x W_k))_j), v_j = SiLU(Conv4(x W_v))_j, β_j = σ(x W_b)_j   (j = 1..n_h; × 2 with
//       allow_neg_eigval, on by default: eigenvalues in (−1, 1) let the product of Householder steps track state)
//   g = −exp(A_log) · softplus(x w_a + dt_bias)          (the Gated DeltaNet decay, once per token)
//   y = gated delta product (runtime/delta_product/delta_product.h), q scaled by d_k^-1/2, state [B, H, d_k, d_v]
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) )
// W_k, W_v, W_b give the n_h steps in fla's (n, h, d) order. Decode state: "memory" and the conv caches.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/delta_product/delta_product.h"
#include "runtime/kernels/precision.h"
#include "runtime/no_weight_decay.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/delta_product/fla_names.h"
#include "runtime/registry.h"

namespace mnemo {

struct GatedDeltaProductArgs {
  int64_t num_householder = 2;  // n_h, delta steps per token (the paper's DeltaProduct_2 by default)
  int64_t num_heads = 0;        // 0: the model's n_heads
  int64_t head_dim = 0;         // d_k; 0: d_model / heads
  double expand_v = 2.0;        // d_v = expand_v · d_k
  int64_t conv_size = 4;
  bool use_short_conv = true;
  bool use_forget_gate = true;
  bool allow_neg_eigval = true;  // β ∈ (0, 2)
  int64_t chunk_size = 64;       // rows (token steps) per chunk; speed knob only
  std::string form = "chunk";    // "chunk" | "recurrent"
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatedDeltaProductArgs, num_householder, num_heads, head_dim, expand_v,
                                                conv_size, use_short_conv, use_forget_gate, allow_neg_eigval,
                                                chunk_size, form)

class GatedDeltaProductMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  GatedDeltaProductMixer(const MixerContext& ctx, const GatedDeltaProductArgs& a) : args_(a) {
    const std::string family = "gated_deltaproduct";
    check_kernel_form(family, a.form, a.chunk_size);
    if (a.num_householder < 1)
      throw Error(family + ": num_householder must be >= 1, got " + std::to_string(a.num_householder));
    if (a.conv_size < 1) throw Error(family + ": conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.num_heads < 0 || a.head_dim < 0)
      throw Error(family + ": num_heads and head_dim must be >= 0 (0 = automatic), got " +
                  std::to_string(a.num_heads) + " and " + std::to_string(a.head_dim));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      dk_ = a.head_dim;
    } else {
      if (H_ < 1 || ctx.d_model % H_ != 0)
        throw Error(family + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " +
                    std::to_string(H_) + " heads (set head_dim)");
      dk_ = ctx.d_model / H_;
    }
    const double dv = a.expand_v * static_cast<double>(dk_);
    if (!(a.expand_v > 0) || std::abs(dv - std::round(dv)) > 1e-9 || std::round(dv) < 1)
      throw Error(family + ": expand_v " + std::to_string(a.expand_v) + " times head_dim " + std::to_string(dk_) +
                  " must be a positive integer");
    dv_ = static_cast<int64_t>(std::round(dv));
    n_ = a.num_householder;

    auto proj = [&](int64_t heads, int64_t dim, bool l2, const std::string& name) {
      return register_module(name + "_proj", HeadProjection(template_projection(ctx.d_model, heads, dim,
                                                                                a.use_short_conv, a.conv_size, l2),
                                                            name));
    };
    q_proj_ = proj(H_, dk_, true, "q");
    k_proj_ = proj(n_ * H_, dk_, true, "k");
    v_proj_ = proj(n_ * H_, dv_, false, "v");
    b_proj_ = register_module("b_proj", make_linear(ctx.d_model, n_ * H_));
    if (a.use_forget_gate) {
      a_proj_ = register_module("a_proj", make_linear(ctx.d_model, H_));
      torch::NoGradGuard no_grad;
      A_log_ = register_parameter("A_log", init_a_log(H_, 1e-6, 16.0));  // A ~ U(0, 16), kept > 0
      dt_bias_ = register_parameter("dt_bias", init_dt_bias(H_));
    }
    output_ = register_module("output", GatedOutput(ctx.d_model, H_, dv_));
  }

  std::vector<std::string> no_weight_decay() const override {
    return args_.use_forget_gate ? std::vector<std::string>{"A_log", "dt_bias"} : std::vector<std::string>{};
  }

  // Decode: the conv caches and the recurrent state: fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1);
    auto in = inputs(x, [&](HeadProjection& p) { return p(x, state); });
    auto h0 = state_or_empty(state, "memory");
    // On a GPU the rows run the delta rule's fused chunk kernels (runtime/delta_rule/chunk_kernel.cuh).
    auto r = !use_chunked_kernel(args_.form, state, T)
                 ? gated_delta_product_recurrent(in.q, in.k, in.v, in.beta, in.g, h0, scale(), n_)
             : delta_rule_fused_route(in.q)
                 ? gated_delta_product_chunk_fused(in.q, in.k, in.v, in.beta, in.g, h0, scale(), n_, args_.chunk_size)
                 : gated_delta_product_chunk(in.q, in.k, in.v, in.beta, in.g, h0, scale(), n_, args_.chunk_size);
    if (state) state->tensors["memory"] = r.final_state.detach();
    return output_(r.o.to(x.scalar_type()), x);
  }

  // Packed sequences: the fused chunk kernels with each document's row bounds (docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, delta_rule_fused_on_device(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto in = inputs(x, [&](HeadProjection& p) { return p->forward_packed(x, seqs); });
    auto r = gated_delta_product_chunk_fused(in.q, in.k, in.v, in.beta, in.g, {}, scale(), n_, args_.chunk_size,
                                             seqs.cu_seqlens);
    return output_(r.o.to(x.scalar_type()), x);
  }

 private:
  // q [B, T, H, d_k]; k, v, β with the n_h steps of token t at rows t·n_h .. (B, T·n_h, H, ·); the decay g [B, T, H]
  // (undefined without the forget gate). `project` runs a q/k/v projection with its short conv.
  struct RowInputs {
    torch::Tensor q, k, v, beta, g;
  };
  template <class Project>
  RowInputs inputs(const torch::Tensor& x, Project&& project) {
    const int64_t B = x.size(0), T = x.size(1);
    RowInputs in;
    in.q = project(q_proj_);
    in.k = project(k_proj_).reshape({B, T * n_, H_, dk_});
    in.v = project(v_proj_).reshape({B, T * n_, H_, dv_});
    const auto dt = recurrence_dtype(x);
    in.beta = torch::sigmoid(b_proj_(x).to(dt)).reshape({B, T * n_, H_});
    if (args_.allow_neg_eigval) in.beta = in.beta * 2.0;
    if (args_.use_forget_gate) in.g = -A_log_.to(dt).exp() * torch::softplus(a_proj_(x).to(dt) + dt_bias_.to(dt));
    return in;
  }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(dk_)); }

  GatedDeltaProductArgs args_;
  int64_t H_ = 0, dk_ = 0, dv_ = 0, n_ = 1;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear b_proj_{nullptr}, a_proj_{nullptr};
  torch::Tensor A_log_, dt_bias_;
  GatedOutput output_{nullptr};
};

// n_h delta-rule rows per token, each costing a chunked-recurrence row (runtime/mixing_flops.h).
double delta_product_flops(const MixingFlopsQuery& q) {
  const json& n = q.args.contains("num_householder") ? q.args.at("num_householder") : json(2);
  return static_cast<double>(n.is_number() ? n.get<double>() : 2.0) * chunked_recurrence_flops(q);
}

void register_delta_product_family(Registry& r) {
  r.add_mixer(make_mixer_family<GatedDeltaProductArgs, GatedDeltaProductMixer>(
      "gated_deltaproduct",
      "Gated DeltaProduct: n_h delta-rule steps per token with the Gated DeltaNet decay (docs/models.md#gated-deltaproduct)",
      {delta_product_flops,
       {"recent linear memories", "red", {{"num_householder", "n_h"}, {"allow_neg_eigval", "allow_neg_eigval"}}},
       2e-3,
       {gated_deltaproduct_fla_names()},
       {{"num_householder", "n_h, delta-rule (Householder) steps per token"}}}));
}

}  // namespace mnemo
