// Miras mixers Moneta, Yaad, Memora (docs/models.md#miras, docs/models.md#moneta, docs/models.md#yaad, docs/models.md#memora) on the standard recurrent-memory template (docs/models.md#shared-building-blocks):
//   q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = SiLU(Conv4(x W_v))      per head, d_k = d_v = d_h
//   channel-wise low-rank gates (docs/models.md#shared-building-blocks, rank 32): α = σ((x U_α) V_α + b_α) (b_α = +6), η = η_max σ((x U_η) V_η + b_η)
//   (gate_granularity "channel": a vector in R^{d_h} per head; "head": one scalar per head)
//   Yaad: δ_t = softplus(x w_δ + b_δ) per head (b_δ = 0.5413, δ ≈ 1 at init)
//   y_t = M_{W_t}(q_t), memory x + LN(W_1 GELU(W_2 x)) with the family's bias / retention / chunk rule (miras.h)
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) )
// Learned initial memory per head: Xavier-uniform weights (Yaad), accumulator A_0 (Moneta, W_0 = A_0/||A_0||_q^{q-2}),
// logits Z_0 ~ N(0, 0.02) with W_0 = softmax_row(Z_0) (Memora).
// Decode state: "miras_cur<l>", "miras_anchor<l>" ([B, H, out, in]), "miras_pos" (int64 scalar) and the conv
// caches: constant size in T.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/miras/miras.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

#define MIRAS_COMMON_FIELDS                                                                               \
  int64_t num_heads = 0;                    /* 0: the model's n_heads */                                  \
  int64_t chunk_size = 64;                  /* b: part of the model (docs/models.md#conventions) */                             \
  int64_t conv_size = 4;                                                                                  \
  bool use_short_conv = true;                                                                             \
  std::string form = "chunk";               /* "chunk" (dual form) | "recurrent" (token by token) */      \
  int64_t gate_rank = 32;                                                                                 \
  std::string gate_granularity = "channel"; /* "channel" | "head" */                                      \
  double alpha_bias = 6.0;                                                                                \
  double eta_max = 0.1;                                                                                   \
  double eta_bias = 0.0;                                                                                  \
  int64_t expansion = 4;                                                                                  \
  double ln_eps = 1e-5;

struct MonetaArgs {
  MIRAS_COMMON_FIELDS
  double p = 3.0;
  double q = 4.0;
  double lp_eps = 1e-6;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MonetaArgs, num_heads, chunk_size, conv_size, use_short_conv, form,
                                                gate_rank, gate_granularity, alpha_bias, eta_max, eta_bias, expansion,
                                                ln_eps, p, q, lp_eps)

struct YaadArgs {
  MIRAS_COMMON_FIELDS
  double delta_bias = 0.5413;  // softplus(0.5413) ≈ 1
  bool input_dependent_delta = true;
  double huber_eps = 1e-6;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(YaadArgs, num_heads, chunk_size, conv_size, use_short_conv, form,
                                                gate_rank, gate_granularity, alpha_bias, eta_max, eta_bias, expansion,
                                                ln_eps, delta_bias, input_dependent_delta, huber_eps)

struct MemoraArgs {
  MIRAS_COMMON_FIELDS
  double kl_floor = 1e-6;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MemoraArgs, num_heads, chunk_size, conv_size, use_short_conv, form,
                                                gate_rank, gate_granularity, alpha_bias, eta_max, eta_bias, expansion,
                                                ln_eps, kl_floor)
#undef MIRAS_COMMON_FIELDS

class MirasMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  MirasMixer(const MixerContext& ctx, const MonetaArgs& a) : MirasMixer(ctx, common(a, "moneta")) {
    if (!(a.p >= 1)) throw Error("moneta: p must be >= 1, got " + std::to_string(a.p));
    if (!(a.q >= 1)) throw Error("moneta: q must be >= 1, got " + std::to_string(a.q));
    mo_.bias = "lp";
    mo_.retention = "lq";
    mo_.p = a.p;
    mo_.q = a.q;
    mo_.lp_eps = a.lp_eps;
  }
  MirasMixer(const MixerContext& ctx, const YaadArgs& a) : MirasMixer(ctx, common(a, "yaad")) {
    mo_.bias = "huber";
    mo_.huber_eps = a.huber_eps;
    delta_bias_ = a.delta_bias;
    if (a.input_dependent_delta) {
      delta_proj_ = register_module("delta_proj", make_linear(ctx.d_model, heads_, /*bias=*/true));
      torch::NoGradGuard ng;
      delta_proj_->bias.fill_(a.delta_bias);
    }
  }
  MirasMixer(const MixerContext& ctx, const MemoraArgs& a) : MirasMixer(ctx, common(a, "memora")) {
    mo_.retention = "kl";
    mo_.kl_floor = a.kl_floor;
  }

  std::vector<std::string> no_weight_decay() const override {  // the learned initial memory (docs/models.md#conventions)
    std::vector<std::string> names;
    for (size_t l = 0; l < init_.size(); ++l) names.push_back("memory_init_" + std::to_string(l));
    return names;
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
    const auto dt = recurrence_dtype(x);
    const int64_t G = opt_.gate_granularity == "channel" ? d_ : 1;
    auto log_alpha = torch::log_sigmoid(alpha_up_(alpha_down_(x)).to(dt)).view({B, T, heads_, G});
    auto eta = (torch::sigmoid(eta_up_(eta_down_(x)).to(dt)) * opt_.eta_max).view({B, T, heads_, G});
    torch::Tensor delta;
    if (mo_.bias == "huber") {
      delta = delta_proj_ ? torch::softplus(delta_proj_(x).to(dt))
                          : torch::full({B, T, heads_}, std::log1p(std::exp(delta_bias_)), x.options().dtype(dt));
    }
    MirasState st;
    if (state && state->has("miras_cur0")) {
      st.cur = {state->at("miras_cur0"), state->at("miras_cur1")};
      st.anchor = {state->at("miras_anchor0"), state->at("miras_anchor1")};
      st.pos = state->at("miras_pos").item<int64_t>();
    } else {
      for (const auto& w : init_) {
        auto w0 = w.to(dt);
        if (mo_.retention == "kl") w0 = torch::softmax(w0, -1);  // W_0 = softmax_row(Z_0)
        st.cur.push_back(w0.unsqueeze(0).expand({B, -1, -1, -1}));
      }
    }
    auto gamma = ln_w_.view({heads_, d_}), beta = ln_b_.view({heads_, d_});
    const bool recurrent = opt_.form == "recurrent" || (state != nullptr && T == 1);
    auto r = recurrent ? miras_recurrent(q, k, v, log_alpha, eta, delta, gamma, beta, st, mo_)
                       : miras_chunk(q, k, v, log_alpha, eta, delta, gamma, beta, st, mo_);
    if (state) {
      for (size_t l = 0; l < 2; ++l) {
        state->tensors["miras_cur" + std::to_string(l)] = r.state.cur[l].detach().contiguous();
        state->tensors["miras_anchor" + std::to_string(l)] = r.state.anchor[l].detach().contiguous();
      }
      state->tensors["miras_pos"] = torch::tensor(r.state.pos, torch::kLong);
    }
    return output_(r.o.to(x.scalar_type()), x);
  }

 private:
  struct Options {
    std::string family;
    int64_t num_heads, chunk_size, conv_size;
    bool use_short_conv;
    std::string form;
    int64_t gate_rank;
    std::string gate_granularity;
    double alpha_bias, eta_max, eta_bias;
    int64_t expansion;
    double ln_eps;
  };
  template <class A>
  static Options common(const A& a, const std::string& family) {
    return {family, a.num_heads, a.chunk_size, a.conv_size, a.use_short_conv, a.form, a.gate_rank,
            a.gate_granularity, a.alpha_bias, a.eta_max, a.eta_bias, a.expansion, a.ln_eps};
  }

  MirasMixer(const MixerContext& ctx, const Options& o) : opt_(o) {
    const auto& f = o.family;
    if (o.chunk_size < 1) throw Error(f + ": chunk_size must be >= 1, got " + std::to_string(o.chunk_size));
    if (o.conv_size < 1) throw Error(f + ": conv_size must be >= 1, got " + std::to_string(o.conv_size));
    if (o.gate_rank < 1) throw Error(f + ": gate_rank must be >= 1, got " + std::to_string(o.gate_rank));
    if (o.expansion < 1) throw Error(f + ": expansion must be >= 1, got " + std::to_string(o.expansion));
    check_form(f, o.form);
    if (o.gate_granularity != "channel" && o.gate_granularity != "head")
      throw Error(f + ": gate_granularity must be \"channel\" or \"head\", got \"" + o.gate_granularity + "\"");
    if (!(o.eta_max > 0)) throw Error(f + ": eta_max must be > 0, got " + std::to_string(o.eta_max));
    heads_ = o.num_heads > 0 ? o.num_heads : ctx.n_heads;
    if (heads_ < 1) throw Error(f + ": number of heads must be >= 1, got " + std::to_string(heads_));
    if (ctx.d_model % heads_ != 0)
      throw Error(f + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " + std::to_string(heads_) +
                  " heads");
    d_ = ctx.d_model / heads_;
    mo_.chunk = o.chunk_size;
    mo_.expansion = o.expansion;
    mo_.ln_eps = o.ln_eps;
    auto proj = [&](bool l2, const std::string& name) {
      return register_module(name + "_proj",
                             HeadProjection(template_projection(ctx.d_model, heads_, d_, o.use_short_conv,
                                                                o.conv_size, l2),
                                            name));
    };
    q_proj_ = proj(true, "q");
    k_proj_ = proj(true, "k");
    v_proj_ = proj(false, "v");
    const int64_t G = o.gate_granularity == "channel" ? d_ : 1;
    alpha_down_ = register_module("alpha_down", make_linear(ctx.d_model, o.gate_rank));
    alpha_up_ = register_module("alpha_up", make_linear(o.gate_rank, heads_ * G, /*bias=*/true));
    eta_down_ = register_module("eta_down", make_linear(ctx.d_model, o.gate_rank));
    eta_up_ = register_module("eta_up", make_linear(o.gate_rank, heads_ * G, /*bias=*/true));
    {
      torch::NoGradGuard ng;
      alpha_up_->bias.fill_(o.alpha_bias);
      eta_up_->bias.fill_(o.eta_bias);
    }
    ln_w_ = register_parameter("memory_ln_weight", torch::ones({heads_ * d_}));
    ln_b_ = register_parameter("memory_ln_bias", torch::zeros({heads_ * d_}));
    DeepMemorySpec spec;
    spec.kind = MemoryKind::ResidualMLP_LN;
    spec.d_in = spec.d_out = d_;
    spec.expansion = o.expansion;
    auto init = init_memory_weights(spec, heads_);  // Xavier-uniform [H, out, in]
    for (size_t l = 0; l < init.size(); ++l) {
      auto w = f == "memora" ? torch::empty_like(init[l]).normal_(0.0, 0.02) : init[l];
      init_.push_back(register_parameter("memory_init_" + std::to_string(l), w));
    }
    output_ = register_module("output", GatedOutput(ctx.d_model, heads_, d_));
  }

  Options opt_;
  MirasOptions mo_;
  int64_t heads_ = 0, d_ = 0;
  double delta_bias_ = 0;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear alpha_down_{nullptr}, alpha_up_{nullptr}, eta_down_{nullptr}, eta_up_{nullptr},
      delta_proj_{nullptr};
  torch::Tensor ln_w_, ln_b_;
  std::vector<torch::Tensor> init_;
  GatedOutput output_{nullptr};
};

void register_miras_families(Registry& r) {
  // In the CPU quickstart (d_model-64 quickstart cell, 1 thread: moneta 41 s, yaad 37 s, memora 34 s).
  r.add_mixer(make_mixer_family<MonetaArgs, MirasMixer>(
      "moneta", "Moneta: lp attentional bias, lq-normalised accumulator, MLP+LN memory (docs/models.md#moneta)",
      {deep_memory_flops, {"deep test-time memory", "brown"}, 2e-3, {},
       {{"p", "exponent p of Moneta's l_p attentional bias (docs/models.md#moneta)"},
        {"q", "exponent q of Moneta's l_q-normalised accumulator (docs/models.md#moneta)"},
        {"lp_eps", "epsilon of the smooth sign in the l_p bias's gradient"}}},
      /*cpu_quickstart=*/true));
  r.add_mixer(make_mixer_family<YaadArgs, MirasMixer>(
      "yaad", "Yaad: Huber attentional bias with input-dependent delta, MLP+LN memory (docs/models.md#yaad)",
      {deep_memory_flops, {"deep test-time memory", "pink"}, 2e-3, {},
       {{"delta_bias", "initial bias of the Huber threshold delta = softplus(x w + delta_bias) (softplus(0.5413) = 1)"},
        {"input_dependent_delta", "delta from the token; false: delta = softplus(delta_bias) for every token"},
        {"huber_eps", "epsilon of the smooth sign in the Huber l1 branch"}}},
      /*cpu_quickstart=*/true));
  r.add_mixer(make_mixer_family<MemoraArgs, MirasMixer>(
      "memora", "Memora: l2 bias, KL retention on a row-wise simplex, lag-token chunks (docs/models.md#memora)",
      {deep_memory_flops, {"deep test-time memory", "grey"}, 2e-3, {},
       {{"kl_floor", "floor of the weights under the logarithm of Memora's KL retention: log max(W, kl_floor)"}}},
      /*cpu_quickstart=*/true));
}

}  // namespace mnemo
