// TTT-Linear and TTT-MLP mixers (docs/models.md#ttt) on the standard recurrent-memory template
// (docs/models.md#shared-building-blocks): q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = SiLU(Conv4(x W_v)) per head (d_k = d_v = d_h),
// per-token learning rate η_s = (η_base / d_h) σ(x_s θ_lr + b_lr) per head, inner model
//   f(z) = z + LN(f_res(z)) ⊙ w + b_ln,  f_res linear (D -> D) or MLP (D -> 4D -> D, GELU), inner biases,
// mini-batch GD with the dual form of ttt.h (coefficients C[t, s] = row_t col_s), output f(q_t; W_t)
// (output_residual "query"), then out = W_o concat_h(RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h)).
// Coefficient conventions (`eta_convention`): "ttt_lm" (default, ttt-lm-pytorch: row = 1/t_local,
// col = η_s) or "fla" (row = η_t, col = 1).
// Decode state: anchor weights "ttt_W<l>", "ttt_b<l>", accumulators "ttt_acc_W<l>", "ttt_acc_b<l>"
// ([B, H, in, out] / [B, H, 1, out]), the position in the mini-batch "ttt_pos" (int64 scalar) and the
// conv caches "conv_q", "conv_k", "conv_v": constant size in T.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"
#include "runtime/ttt/ttt.h"

namespace mnemo {

struct TTTLinearArgs {
  int64_t num_heads = 0;   // 0: the model's n_heads
  int64_t mini_batch = 16;  // b: part of the model (docs/models.md#conventions)
  double eta_base = 1.0;    // η = (η_base / d_h) σ(·)
  std::string eta_convention = "ttt_lm";  // "ttt_lm" | "fla"
  std::string output_residual = "query";   // "query" (f(q), spec) | "inner" (õ + LN(õ), fla)
  double ln_eps = 1e-6;
  int64_t conv_size = 4;
  bool use_short_conv = true;
  std::string form = "chunk";  // "chunk" (dual form) | "recurrent" (token-by-token reference)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TTTLinearArgs, num_heads, mini_batch, eta_base, eta_convention,
                                                output_residual, ln_eps, conv_size, use_short_conv, form)

struct TTTMLPArgs {
  int64_t num_heads = 0;
  int64_t mini_batch = 16;
  double eta_base = 0.1;
  int64_t expansion = 4;  // hidden = expansion · d_h
  std::string eta_convention = "ttt_lm";
  std::string output_residual = "query";
  double ln_eps = 1e-6;
  int64_t conv_size = 4;
  bool use_short_conv = true;
  std::string form = "chunk";
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TTTMLPArgs, num_heads, mini_batch, eta_base, expansion,
                                                eta_convention, output_residual, ln_eps, conv_size, use_short_conv,
                                                form)

class TTTMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  TTTMixer(const MixerContext& ctx, const TTTLinearArgs& a)
      : TTTMixer(ctx, Options{"ttt_linear", a.num_heads, a.mini_batch, a.eta_base, 0, a.eta_convention,
                              a.output_residual, a.ln_eps, a.conv_size, a.use_short_conv, a.form}) {}
  TTTMixer(const MixerContext& ctx, const TTTMLPArgs& a)
      : TTTMixer(ctx, Options{"ttt_mlp", a.num_heads, a.mini_batch, a.eta_base, a.expansion, a.eta_convention,
                              a.output_residual, a.ln_eps, a.conv_size, a.use_short_conv, a.form}) {}

  // The learned initial inner weights (docs/models.md#conventions).
  std::vector<std::string> no_weight_decay() const override {
    std::vector<std::string> names;
    for (size_t l = 1; l <= W0_.size(); ++l)
      names.insert(names.end(), {"memory_init_W" + std::to_string(l), "memory_init_b" + std::to_string(l)});
    return names;
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
    const auto dt = recurrence_dtype(x);
    auto eta = torch::sigmoid(lr_proj_(x).to(dt)) * (opt_.eta_base / static_cast<double>(d_));  // [B, T, H]

    TTTState st;
    if (state && state->has("ttt_W0")) {
      for (size_t l = 0; l < W0_.size(); ++l) {
        const auto s = std::to_string(l);
        st.anchor.W.push_back(state->at("ttt_W" + s));
        st.anchor.b.push_back(state->at("ttt_b" + s));
        st.acc.W.push_back(state->at("ttt_acc_W" + s));
        st.acc.b.push_back(state->at("ttt_acc_b" + s));
      }
      st.pos = state->at("ttt_pos").item<int64_t>();
    } else {
      for (size_t l = 0; l < W0_.size(); ++l) {
        st.anchor.W.push_back(W0_[l].to(dt).unsqueeze(0).expand({B, -1, -1, -1}));
        st.anchor.b.push_back(b0_[l].to(dt).unsqueeze(0).expand({B, -1, -1, -1}));
      }
    }
    // Position of each token inside its mini-batch (aligned to absolute positions, docs/models.md#conventions).
    auto local = (torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(x.device())) + st.pos) %
                 opt_.mini_batch;
    torch::Tensor row, col;
    if (opt_.eta_convention == "fla") {
      row = eta;
      col = torch::ones_like(eta);
    } else {
      auto inv = 1.0 / (local.to(dt) + 1.0);  // 1 / t_local
      row = inv.view({1, T, 1}).expand_as(eta);
      col = eta;
    }
    TTTOptions o;
    o.mini_batch = opt_.mini_batch;
    o.eps = opt_.ln_eps;
    o.scale = 1.0;
    o.output_residual = opt_.output_residual;
    auto ln_w = ln_w_.view({heads_, d_}), ln_b = ln_b_.view({heads_, d_});
    const bool recurrent = opt_.form == "recurrent" || (state != nullptr && T == 1);
    auto r = recurrent ? ttt_recurrent(q, k, v, row, col, ln_w, ln_b, st, o)
                       : ttt_chunk(q, k, v, row, col, ln_w, ln_b, st, o);
    if (state) {
      for (size_t l = 0; l < W0_.size(); ++l) {
        const auto s = std::to_string(l);
        state->tensors["ttt_W" + s] = r.carry.anchor.W[l].detach().contiguous();
        state->tensors["ttt_b" + s] = r.carry.anchor.b[l].detach().contiguous();
        state->tensors["ttt_acc_W" + s] = r.carry.acc.W[l].detach();
        state->tensors["ttt_acc_b" + s] = r.carry.acc.b[l].detach();
      }
      state->tensors["ttt_pos"] = torch::tensor(r.carry.pos, torch::kLong);
    }
    return output_(r.o.to(x.scalar_type()), x);
  }

 private:
  struct Options {
    std::string family;
    int64_t num_heads, mini_batch;
    double eta_base;
    int64_t expansion;  // 0: linear inner model
    std::string eta_convention, output_residual;
    double ln_eps;
    int64_t conv_size;
    bool use_short_conv;
    std::string form;
  };

  TTTMixer(const MixerContext& ctx, const Options& o) : opt_(o) {
    const auto& f = o.family;
    if (o.mini_batch < 1) throw Error(f + ": mini_batch must be >= 1, got " + std::to_string(o.mini_batch));
    if (o.conv_size < 1) throw Error(f + ": conv_size must be >= 1, got " + std::to_string(o.conv_size));
    check_form(f, o.form);
    if (o.eta_convention != "ttt_lm" && o.eta_convention != "fla")
      throw Error(f + ": eta_convention must be \"ttt_lm\" or \"fla\", got \"" + o.eta_convention + "\"");
    if (o.output_residual != "query" && o.output_residual != "inner")
      throw Error(f + ": output_residual must be \"query\" or \"inner\", got \"" + o.output_residual + "\"");
    if (!(o.eta_base > 0)) throw Error(f + ": eta_base must be > 0, got " + std::to_string(o.eta_base));
    if (o.expansion < 0) throw Error(f + ": expansion must be >= 1, got " + std::to_string(o.expansion));
    heads_ = o.num_heads > 0 ? o.num_heads : ctx.n_heads;
    if (heads_ < 1) throw Error(f + ": number of heads must be >= 1, got " + std::to_string(heads_));
    if (ctx.d_model % heads_ != 0)
      throw Error(f + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " + std::to_string(heads_) +
                  " heads");
    d_ = ctx.d_model / heads_;
    auto proj = [&](bool l2, const std::string& name) {
      return register_module(name + "_proj",
                             HeadProjection(template_projection(ctx.d_model, heads_, d_, o.use_short_conv,
                                                                o.conv_size, l2),
                                            name));
    };
    q_proj_ = proj(true, "q");
    k_proj_ = proj(true, "k");
    v_proj_ = proj(false, "v");
    lr_proj_ = register_module("lr_proj", make_linear(ctx.d_model, heads_, /*bias=*/true));
    // Inner LN affine (outer parameters), stored flat so that weight decay skips them (docs/models.md#conventions).
    ln_w_ = register_parameter("inner_ln_weight", torch::ones({heads_ * d_}));
    ln_b_ = register_parameter("inner_ln_bias", torch::zeros({heads_ * d_}));
    // Learned initial inner weights per head (ttt-lm-pytorch: normal(0, 0.02), biases zero).
    std::vector<int64_t> dims = {d_};
    if (o.expansion > 0) dims.push_back(o.expansion * d_);
    dims.push_back(d_);
    for (size_t l = 0; l + 1 < dims.size(); ++l) {
      const auto s = std::to_string(l + 1);
      W0_.push_back(register_parameter("memory_init_W" + s, torch::empty({heads_, dims[l], dims[l + 1]}).normal_(0.0, 0.02)));
      b0_.push_back(register_parameter("memory_init_b" + s, torch::zeros({heads_, 1, dims[l + 1]})));
    }
    output_ = register_module("output", GatedOutput(ctx.d_model, heads_, d_));
  }

  Options opt_;
  int64_t heads_ = 0, d_ = 0;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear lr_proj_{nullptr};
  torch::Tensor ln_w_, ln_b_;
  std::vector<torch::Tensor> W0_, b0_;
  GatedOutput output_{nullptr};
};

void register_ttt_families(Registry& r) {
  r.add_mixer(make_mixer_family<TTTLinearArgs, TTTMixer>(
      "ttt_linear", "TTT-Linear: linear inner model + LN, mini-batch GD dual form (docs/models.md#ttt)",
      {chunked_recurrence_flops, {"deep test-time memory", "blue"}}));
  r.add_mixer(make_mixer_family<TTTMLPArgs, TTTMixer>(
      "ttt_mlp", "TTT-MLP: 2-layer GELU inner MLP + LN, mini-batch GD dual form (docs/models.md#ttt)",
      {deep_memory_flops, {"deep test-time memory", "orange"}},
      // In the CPU quickstart (d_model-64 quickstart cell, 1 thread: 28 s).
      /*cpu_quickstart=*/true));
}

}  // namespace mnemo
