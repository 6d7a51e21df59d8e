// DeltaNet (docs/models.md#deltanet) and Gated DeltaNet (docs/models.md#gated-deltanet) mixers on the standard recurrent-memory
// template (docs/models.md#shared-building-blocks):
//   q = l2norm(SiLU(Conv4(x W_q))), k = l2norm(SiLU(Conv4(x W_k))), v = SiLU(Conv4(x W_v))
//   β = σ(x w_b + b_b)  (× 2 with allow_neg_eigval; beta_bias false: no b_b, as fla)  (docs/models.md#shared-building-blocks)
//   GDN: g = -exp(A_log) · softplus(x w_a + dt_bias), A ~ U(0, 16), dt_bias = softplus^-1(dt)
//   y = delta rule (read after write, q scaled by d_k^-1/2), state [B, H, d_k, d_v] in fp32
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) )   (plain RMSNorm without output_gate)
// Decode state: "memory" [B, H, d_k, d_v] and the conv caches "conv_q", "conv_k", "conv_v".
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/precision.h"
#include "runtime/no_weight_decay.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/delta_rule/fla_names.h"
#include "runtime/registry.h"

namespace mnemo {

struct DeltaNetArgs {
  int64_t num_heads = 0;    // 0: the model's n_heads
  int64_t head_dim = 0;     // d_k; 0: d_model / heads
  double expand_v = 1.0;    // d_v = expand_v · d_k
  int64_t conv_size = 4;    // short conv kernel (docs/models.md#shared-building-blocks)
  bool use_short_conv = true;
  int64_t chunk_size = 64;  // speed knob only: the chunk form is exact (docs/models.md#conventions)
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
  bool allow_neg_eigval = false;  // β ∈ (0, 2)
  bool output_gate = true;        // gated RMSNorm output (docs/models.md#shared-building-blocks); false: plain per-head RMSNorm
  bool beta_bias = true;          // a bias b_b in β's projection; fla's layers have none (false: exportable to fla)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeltaNetArgs, num_heads, head_dim, expand_v, conv_size,
                                                use_short_conv, chunk_size, form, allow_neg_eigval,
                                                output_gate, beta_bias)

// Gated DeltaNet: with num_heads = head_dim = 0, d_model >= 1024 uses heads of d_k = 256 and
// H = floor(0.75 d_model / 256); smaller models use the model's heads with d_k = d_h (docs/models.md#gated-deltanet).
struct GatedDeltaNetArgs {
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  double expand_v = 2.0;
  int64_t conv_size = 4;
  bool use_short_conv = true;
  int64_t chunk_size = 64;
  std::string form = "chunk";
  bool allow_neg_eigval = false;
  bool output_gate = true;
  double a_init_min = 0.0;  // A ~ U(a_init_min, a_init_max), A_log = log A (docs/models.md#shared-building-blocks)
  double a_init_max = 16.0;
  bool beta_bias = true;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatedDeltaNetArgs, num_heads, head_dim, expand_v, conv_size,
                                                use_short_conv, chunk_size, form, allow_neg_eigval,
                                                output_gate, a_init_min, a_init_max, beta_bias)

// The heads and head dims a delta-rule mixer resolves (a member of DeltaRuleMixer, so not in the anonymous
// namespace: a unity build would warn of a class with a member of internal type).
struct DeltaRuleLayout {
  int64_t heads = 0, d_k = 0, d_v = 0;
};

namespace {

DeltaRuleLayout resolve_layout(const std::string& family, const MixerContext& ctx, int64_t num_heads,
                               int64_t head_dim, double expand_v, bool gdn_auto) {
  DeltaRuleLayout l;
  const int64_t d = ctx.d_model;
  if (num_heads < 0 || head_dim < 0)
    throw Error(family + ": num_heads and head_dim must be >= 0 (0 = automatic), got " +
                std::to_string(num_heads) + " and " + std::to_string(head_dim));
  if (gdn_auto && num_heads == 0 && head_dim == 0 && d >= 1024) {
    l.d_k = 256;
    l.heads = std::max<int64_t>(1, (3 * d / 4) / 256);
  } else {
    l.heads = num_heads > 0 ? num_heads : ctx.n_heads;
    if (l.heads < 1) throw Error(family + ": number of heads must be >= 1, got " + std::to_string(l.heads));
    if (head_dim > 0) {
      l.d_k = head_dim;
    } else {
      if (d % l.heads != 0)
        throw Error(family + ": d_model " + std::to_string(d) + " is not divisible by " +
                    std::to_string(l.heads) + " heads (set head_dim)");
      l.d_k = d / l.heads;
    }
  }
  const double dv = expand_v * static_cast<double>(l.d_k);
  if (!(expand_v > 0) || std::abs(dv - std::round(dv)) > 1e-9 || std::round(dv) < 1)
    throw Error(family + ": expand_v " + std::to_string(expand_v) + " times head_dim " + std::to_string(l.d_k) +
                " must be a positive integer");
  l.d_v = static_cast<int64_t>(std::round(dv));
  return l;
}

void check_common(const std::string& family, int64_t conv_size, int64_t chunk_size, const std::string& form) {
  if (conv_size < 1) throw Error(family + ": conv_size must be >= 1, got " + std::to_string(conv_size));
  if (chunk_size < 1) throw Error(family + ": chunk_size must be >= 1, got " + std::to_string(chunk_size));
  check_form(family, form);
}

}  // namespace

class DeltaRuleMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  DeltaRuleMixer(const MixerContext& ctx, const DeltaNetArgs& a) : DeltaRuleMixer(ctx, common(a), false) {}
  DeltaRuleMixer(const MixerContext& ctx, const GatedDeltaNetArgs& a) : DeltaRuleMixer(ctx, common(a), true) {
    torch::NoGradGuard no_grad;
    if (!(a.a_init_min >= 0 && a.a_init_max > a.a_init_min))
      throw Error("gated_deltanet: need 0 <= a_init_min < a_init_max, got " + std::to_string(a.a_init_min) +
                  ", " + std::to_string(a.a_init_max));
    a_proj_ = register_module("a_proj", make_linear(ctx.d_model, layout_.heads));
    // U(0, 16) can draw 0 only with probability 0; keep A > 0 so that A_log is finite.
    A_log_ = register_parameter("A_log", init_a_log(layout_.heads, std::max(a.a_init_min, 1e-6), a.a_init_max));
    dt_bias_ = register_parameter("dt_bias", init_dt_bias(layout_.heads));
  }

  std::vector<std::string> no_weight_decay() const override {
    return gated_ ? std::vector<std::string>{"A_log", "dt_bias"} : std::vector<std::string>{};
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    auto [beta, g] = gates(x);

    torch::Tensor h0;
    if (state && state->has("memory")) h0 = state->at("memory");
    const double scale = 1.0 / std::sqrt(static_cast<double>(layout_.d_k));
    const bool recurrent = opt_.form == "recurrent" || (state != nullptr && T == 1);
    // On a GPU the fused chunk kernels (chunk_kernel.cuh) replace the eager chunk form, its reference on the CPU.
    auto r = recurrent                        ? delta_rule_recurrent(q, k, v, beta, g, h0, scale)
             : delta_rule_fused_route(q) ? delta_rule_chunk_fused(q, k, v, beta, g, h0, scale, opt_.chunk_size)
                                          : delta_rule_chunk(q, k, v, beta, g, h0, scale, opt_.chunk_size);
    if (state) state->tensors["memory"] = r.final_state.detach();

    return output(r.o, x);
  }

  // Decode: the conv caches and the recurrent state, fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  // Packed sequences: the fused chunk form with cu_seqlens (the CUDA kernel on a GPU, docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return opt_.form == "chunk" && packed_forms_enabled(x, delta_rule_fused_on_device(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto q = q_proj_->forward_packed(x, seqs), k = k_proj_->forward_packed(x, seqs),
         v = v_proj_->forward_packed(x, seqs);
    auto [beta, g] = gates(x);
    const double scale = 1.0 / std::sqrt(static_cast<double>(layout_.d_k));
    auto r = delta_rule_chunk_fused(q, k, v, beta, g, {}, scale, opt_.chunk_size, seqs.cu_seqlens);
    return output(r.o, x);
  }

 private:
  // β [B, T, H] and the log decay g (undefined for DeltaNet), in the recurrence precision.
  std::pair<torch::Tensor, torch::Tensor> gates(const torch::Tensor& x) {
    const auto dt = recurrence_dtype(x);
    auto beta = torch::sigmoid(b_proj_(x).to(dt));
    if (opt_.allow_neg_eigval) beta = beta * 2.0;
    torch::Tensor g;
    if (gated_) g = -A_log_.to(dt).exp() * torch::softplus(a_proj_(x).to(dt) + dt_bias_.to(dt));
    return {beta, g};
  }
  // The delta rule's output o [B, T, H, d_v] through the (gated) per-head norm and W_o.
  torch::Tensor output(const torch::Tensor& o, const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    auto y = o.to(x.scalar_type());
    if (gated_output_) return gated_output_(y, x);
    return o_proj_(norm_(y).reshape({B, T, layout_.heads * layout_.d_v}));
  }

  struct Options {
    std::string family;
    int64_t num_heads, head_dim;
    double expand_v;
    int64_t conv_size;
    bool use_short_conv;
    int64_t chunk_size;
    std::string form;
    bool allow_neg_eigval, output_gate, beta_bias;
  };
  template <class A>
  static Options common(const A& a) {
    const bool gdn = std::is_same<A, GatedDeltaNetArgs>::value;
    return {gdn ? "gated_deltanet" : "deltanet", a.num_heads, a.head_dim, a.expand_v, a.conv_size,
            a.use_short_conv, a.chunk_size, a.form, a.allow_neg_eigval, a.output_gate, a.beta_bias};
  }

  DeltaRuleMixer(const MixerContext& ctx, const Options& o, bool gated) : opt_(o), gated_(gated) {
    check_common(o.family, o.conv_size, o.chunk_size, o.form);
    layout_ = resolve_layout(o.family, ctx, o.num_heads, o.head_dim, o.expand_v, gated);
    auto proj = [&](int64_t dim, bool l2, const std::string& name) {
      HeadProjectionOptions p;
      p.d_model = ctx.d_model;
      p.n_heads = layout_.heads;
      p.head_dim = dim;
      p.short_conv = o.use_short_conv;
      p.conv_size = o.conv_size;
      p.silu = true;
      p.l2_normalize = l2;
      return register_module(name + "_proj", HeadProjection(p, name));
    };
    q_proj_ = proj(layout_.d_k, true, "q");
    k_proj_ = proj(layout_.d_k, true, "k");
    v_proj_ = proj(layout_.d_v, false, "v");
    b_proj_ = register_module("b_proj", make_linear(ctx.d_model, layout_.heads, o.beta_bias));
    if (o.output_gate) {
      gated_output_ = register_module("output", GatedOutput(ctx.d_model, layout_.heads, layout_.d_v));
    } else {
      norm_ = register_module("norm", RMSNorm(layout_.d_v));
      o_proj_ = register_module("o_proj", make_linear(layout_.heads * layout_.d_v, ctx.d_model));
    }
  }

  Options opt_;
  bool gated_;
  DeltaRuleLayout layout_;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear b_proj_{nullptr}, a_proj_{nullptr}, o_proj_{nullptr};
  torch::Tensor A_log_, dt_bias_;
  GatedOutput gated_output_{nullptr};
  RMSNorm norm_{nullptr};
};

void register_delta_rule_families(Registry& r) {
  r.add_mixer(make_mixer_family<DeltaNetArgs, DeltaRuleMixer>(
      "deltanet", "DeltaNet: delta-rule linear memory, chunked WY form (docs/models.md#deltanet)",
      {chunked_recurrence_flops,
       {"linear recurrent", "cyan", {{"allow_neg_eigval", "allow_neg_eigval"}}},
       2e-3,
       {deltanet_fla_names()}}));
  r.add_mixer(make_mixer_family<GatedDeltaNetArgs, DeltaRuleMixer>(
      "gated_deltanet", "Gated DeltaNet: delta rule with Mamba2-style decay (docs/models.md#gated-deltanet)",
      {chunked_recurrence_flops,
       {"linear recurrent", "green", {{"allow_neg_eigval", "allow_neg_eigval"}}},
       1.6e-2,
       {gated_deltanet_fla_names()},
       {{"num_heads", "heads; 0 with head_dim 0: d_model >= 1024 takes floor(0.75 d_model / 256) heads of d_k = 256, "
                      "smaller models the model's n_heads (docs/models.md#gated-deltanet)"},
        {"head_dim", "key width d_k per head; 0: see num_heads"}}}));
}

}  // namespace mnemo
