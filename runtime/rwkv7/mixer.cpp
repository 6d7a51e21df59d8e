// `rwkv7` mixer: RWKV-7 "Goose" time mixing (docs/models.md#rwkv-7; arXiv 2503.14456 §4, and flash-linear-attention's
// RWKV7Attention layer for the parameterisation and the names). With x_{-1} the previous token's input (0 before the
// first) and lerp_* (x) = x + (x_{-1} − x) ⊙ μ_* (token shift, one μ per use):
//   r = W_r lerp_r, k = W_k lerp_k, v = W_v lerp_v
//   w = −e^{−1/2} σ(W_w↑ tanh(W_w↓ lerp_w) + b_w)      log decay per key channel, in [−e^{−1/2}, 0]
//   a_in = σ(W_a↑ W_a↓ lerp_a + b_a),  g = W_g↑ σ(W_g↓ lerp_g)      (in-context learning rate, output gate)
//   κ̂ = l2norm_h(k ⊙ ξ)  (ξ = k_k),  k̃ = k ⊙ (1 + (a_in − 1) ⊙ α)  (α = k_a)
//   S_t = (Diag(e^{w_t}) + (κ̂ ⊙ a_in)ᵀ (−κ̂)) S_{t-1} + k̃ᵀ v      (runtime/rwkv7/rwkv7.h, a = −κ̂, b = κ̂ ⊙ a_in)
//   y = GroupNorm_h(r S_t) + ((r ⊙ k̃ ⊙ ρ)·1)_h v_h      (ρ = r_k: the bonus of the current token)
//   out = W_o (y ⊙ g)
// Value residual (value_residual, arXiv 2503.14456 §4.1): the model's first rwkv7 layer hands its v to the later ones
// (ModelScratch), which use v ← lerp(v, v_first, σ(W_v↑ W_v↓ lerp_v + b_v)) in place of their own v. Decode state:
// "memory" [B, H, d_h, d_h] and "shift" [B, d_model] (the last input).
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"
#include "runtime/no_weight_decay.h"
#include "runtime/registry.h"
#include "runtime/rwkv7/fla_names.h"
#include "runtime/rwkv7/rwkv7.h"

namespace mnemo {

struct Rwkv7Args {
  int64_t num_heads = 0;           // 0: the model's n_heads
  int64_t head_dim = 0;            // d_h (keys and values); 0: d_model / heads
  int64_t decay_low_rank_dim = 0;  // 0: max(32, round(2.5 √d · d_h/64 / 32) · 32), as the paper's released models
  int64_t a_low_rank_dim = 0;      // 0: as decay_low_rank_dim
  int64_t gate_low_rank_dim = 0;   // 0: max(32, round(5 √d / 32) · 32)
  int64_t v_low_rank_dim = 0;      // 0: max(32, round(1.7 √d · d_h/64 / 32) · 32)
  bool value_residual = true;      // later rwkv7 layers mix in the first one's values
  double group_norm_eps = 1e-5;    // the group norm's eps is d_h · group_norm_eps
  int64_t chunk_size = 64;         // speed knob only: the chunk form is exact
  int64_t rwkv7_sub_chunk = 8;     // rows per block of the decayed score matrices when decays do not factorise
  std::string form = "chunk";      // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Rwkv7Args, num_heads, head_dim, decay_low_rank_dim, a_low_rank_dim,
                                                gate_low_rank_dim, v_low_rank_dim, value_residual, group_norm_eps,
                                                chunk_size, rwkv7_sub_chunk, form)

namespace {

constexpr double kRwkv7DecayBound = 0.6065306597126334;  // e^{−1/2}

}  // namespace

int64_t rwkv7_low_rank_dim(int64_t given, double factor, int64_t d_model) {
  if (given > 0) return given;
  return std::max<int64_t>(32, static_cast<int64_t>(std::llround(factor * std::sqrt(double(d_model)) / 32.0)) * 32);
}

class Rwkv7Mixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  Rwkv7Mixer(const MixerContext& ctx, const Rwkv7Args& a) : args_(a) {
    check_kernel_form("rwkv7", a.form, a.chunk_size);
    if (a.rwkv7_sub_chunk < 1)
      throw Error("rwkv7: rwkv7_sub_chunk must be >= 1, got " + std::to_string(a.rwkv7_sub_chunk));
    if (!(a.group_norm_eps > 0))
      throw Error("rwkv7: group_norm_eps must be > 0, got " + std::to_string(a.group_norm_eps));
    if (a.num_heads < 0 || a.head_dim < 0 || a.decay_low_rank_dim < 0 || a.a_low_rank_dim < 0 ||
        a.gate_low_rank_dim < 0 || a.v_low_rank_dim < 0)
      throw Error("rwkv7: num_heads, head_dim and the *_low_rank_dim must be >= 0 (0 = automatic)");
    D_ = ctx.d_model;
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      dh_ = a.head_dim;
    } else {
      if (H_ < 1 || D_ % H_ != 0)
        throw Error("rwkv7: d_model " + std::to_string(D_) + " is not divisible by " + std::to_string(H_) +
                    " heads (set head_dim)");
      dh_ = D_ / H_;
    }
    const int64_t HD = H_ * dh_;
    const double head_factor = double(dh_) / 64.0;
    const int64_t rank_w = rwkv7_low_rank_dim(a.decay_low_rank_dim, 2.5 * head_factor, D_);
    const int64_t rank_a = rwkv7_low_rank_dim(a.a_low_rank_dim, 2.5 * head_factor, D_);
    const int64_t rank_g = rwkv7_low_rank_dim(a.gate_low_rank_dim, 5.0, D_);
    // The value residual needs the model's scratch; a mixer built on its own sees its own layer alone.
    scratch_ = a.value_residual ? ctx.scratch : nullptr;
    hands_values_ = scratch_ && ctx.first_layer_of_mixer;

    r_proj_ = register_module("r_proj", make_linear(D_, HD));
    k_proj_ = register_module("k_proj", make_linear(D_, HD));
    v_proj_ = register_module("v_proj", make_linear(D_, HD));
    o_proj_ = register_module("o_proj", make_linear(HD, D_));
    w_down_ = register_module("w_down", make_linear(D_, rank_w));
    w_up_ = register_module("w_up", make_linear(rank_w, HD, /*bias=*/true));
    a_down_ = register_module("a_down", make_linear(D_, rank_a));
    a_up_ = register_module("a_up", make_linear(rank_a, HD, /*bias=*/true));
    g_down_ = register_module("g_down", make_linear(D_, rank_g));
    g_up_ = register_module("g_up", make_linear(rank_g, HD));
    if (scratch_ && !hands_values_) {
      const int64_t rank_v = rwkv7_low_rank_dim(a.v_low_rank_dim, 1.7 * head_factor, D_);
      v_down_ = register_module("v_down", make_linear(D_, rank_v));
      v_up_ = register_module("v_up", make_linear(rank_v, HD, /*bias=*/true));
    }
    init_rwkv_values(ctx);
  }

  std::vector<std::string> no_weight_decay() const override { return {"r_k", "g_norm_weight"}; }

  // Decode: the token shifts and the recurrent state (the value residual passes within the step): fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    // Token shift: x_{-1} is the carried last input (zero at the start).
    auto prev = state_or_empty(state, "shift");
    if (!prev.defined()) prev = torch::zeros({B, D_}, x.options());
    auto shifted = torch::cat({prev.to(x.scalar_type()).unsqueeze(1), x.narrow(1, 0, T - 1)}, 1);
    if (state) state->tensors["shift"] = x.select(1, T - 1).detach();
    auto delta = shifted - x;
    auto lerp = [&](const torch::Tensor& mu) { return torch::addcmul(x, delta, mu); };

    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H_, dh_}); };
    auto r = heads(r_proj_(lerp(x_r_)));
    auto k = heads(k_proj_(lerp(x_k_)));
    auto x_v = lerp(x_v_);
    auto v = heads(v_proj_(x_v));
    if (hands_values_) {
      scratch_->tensors[kFirstValues] = v;
    } else if (v_up_) {
      auto it = scratch_->tensors.find(kFirstValues);
      if (it == scratch_->tensors.end() || it->second.sizes() != v.sizes())
        throw Error("rwkv7: the value residual needs the first rwkv7 layer's values of the same forward");
      v = torch::lerp(v, it->second.to(v.scalar_type()), heads(torch::sigmoid(v_up_(v_down_(x_v)))).to(v.scalar_type()));
    }
    const auto dt = recurrence_dtype(x);
    // Log decay in the recurrence precision (docs/models.md#numerical-stability rule 2).
    auto w = heads(-kRwkv7DecayBound * torch::sigmoid(w_up_(torch::tanh(w_down_(lerp(x_w_)))).to(dt)));
    auto a_in = heads(torch::sigmoid(a_up_(a_down_(lerp(x_a_)))));
    auto g = g_up_(torch::sigmoid(g_down_(lerp(x_g_))));

    auto kk = k * k_k_.view({H_, dh_});
    kk = kk / kk.norm(2, -1, true).clamp_min(1e-12);           // κ̂ (l2 over each head)
    auto k_mix = k * (1.0 + (a_in - 1.0) * k_a_.view({H_, dh_}));      // k̃

    auto h0 = state_or_empty(state, "memory");
    auto res = use_chunked_kernel(args_.form, state, T)
                   ? rwkv7_chunk(r, w, k_mix, v, -kk, kk * a_in, h0, 1.0, args_.chunk_size, args_.rwkv7_sub_chunk)
                   : rwkv7_recurrent(r, w, k_mix, v, -kk, kk * a_in, h0, 1.0);
    if (state) state->tensors["memory"] = res.final_state.detach();

    // Group norm over each head's d_h channels (statistics in fp32, or fp64), then the current-token bonus.
    auto y = res.o.to(dt);
    auto mean = y.mean(-1, true), var = (y - mean).pow(2).mean(-1, true);
    y = ((y - mean) * torch::rsqrt(var + double(dh_) * args_.group_norm_eps)).to(x.scalar_type());
    y = y * g_norm_weight_.view({H_, dh_}) + g_norm_bias_.view({H_, dh_});
    auto bonus = (r * k_mix * r_k_).sum(-1, true) * v;
    return o_proj_(((y + bonus).reshape({B, T, H_ * dh_})) * g);
  }

 private:
  // RWKV-7's initialisation (the released RWKV-7 models', as fla's RWKV7Attention has it) with l = layer,
  // L = layers, n over the d_model (or key) channels: μ_* = 1 − (n/d)^{p·(1 − l/L)}, decay bias
  // −6 + 6 (n/(d−1))^{1 + (l/(L−1))^0.3} + 1/2 + 2.5 z (z a squared zigzag over each head), a bias −0.19 + 0.3 z +
  // 0.4 (n/(d−1) − 1/2), ξ = 0.71 − 0.1 (n/(d−1) − 1/2), α = 1.02, ρ = −0.04, group-norm weight ((l+1)/L)^0.7.
  // The low-rank down projections and W_o start small and random rather than at zero (decision in the docs), so the
  // first step moves every parameter.
  void init_rwkv_values(const MixerContext& ctx) {
    torch::NoGradGuard no_grad;
    const int64_t HD = H_ * dh_;
    const double l = double(ctx.layer_index), L = double(std::max<int64_t>(ctx.n_layers, 1));
    const double ratio_0_to_1 = L > 1 ? l / (L - 1) : 0.0, ratio_1_to_0 = 1.0 - l / L;
    auto fopt = torch::TensorOptions().dtype(torch::kFloat32);
    auto n_model = torch::arange(D_, fopt);
    auto ddd = n_model / double(D_);
    auto mu = [&](double p) { return 1.0 - ddd.pow(p * ratio_1_to_0); };
    x_r_ = register_parameter("x_r", mu(0.2));
    x_w_ = register_parameter("x_w", mu(0.9));
    x_k_ = register_parameter("x_k", mu(0.7));
    x_v_ = register_parameter("x_v", mu(0.7));
    x_a_ = register_parameter("x_a", mu(0.9));
    x_g_ = register_parameter("x_g", mu(0.2));
    auto n_key = torch::arange(HD, fopt);
    auto linear = n_key / double(std::max<int64_t>(HD - 1, 1)) - 0.5;
    const double half = std::max(double(dh_ - 1) / 2.0, 0.5);
    auto zig = (torch::remainder(n_key, double(dh_)) - double(dh_ - 1) / 2.0) / half;
    zig = zig * zig.abs();
    auto www = -6.0 + 6.0 * (n_key / double(std::max<int64_t>(HD - 1, 1))).pow(1.0 + std::pow(ratio_0_to_1, 0.3));
    k_k_ = register_parameter("k_k", 0.71 - 0.1 * linear);
    k_a_ = register_parameter("k_a", torch::full({HD}, 1.02, fopt));
    r_k_ = register_parameter("r_k", torch::full({H_, dh_}, -0.04, fopt));
    g_norm_weight_ = register_parameter("g_norm_weight", torch::full({HD}, std::pow((l + 1.0) / L, 0.7), fopt));
    g_norm_bias_ = register_parameter("g_norm_bias", torch::zeros({HD}, fopt));
    w_up_->bias.copy_(www + 0.5 + 2.5 * zig);
    a_up_->bias.copy_(-0.19 + 0.3 * zig + 0.4 * linear);
    for (auto* lin : {&w_down_, &a_down_, &g_down_}) (*lin)->weight.normal_(0.0, 0.01);
    if (v_up_) {
      v_down_->weight.normal_(0.0, 0.01);
      v_up_->bias.copy_(0.73 - 0.4 * linear);  // σ(0.73) ≈ 0.67 of the first layer's values at the start
    }
    o_proj_->weight.mul_(0.1);
  }

  static constexpr const char* kFirstValues = "rwkv7.v_first";
  Rwkv7Args args_;
  int64_t D_ = 0, H_ = 0, dh_ = 0;
  std::shared_ptr<ModelScratch> scratch_;  // set with value_residual inside a model
  bool hands_values_ = false;              // the model's first rwkv7 layer: its v goes to the later ones
  torch::nn::Linear r_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr}, w_down_{nullptr},
      w_up_{nullptr}, a_down_{nullptr}, a_up_{nullptr}, g_down_{nullptr}, g_up_{nullptr}, v_down_{nullptr},
      v_up_{nullptr};  // v_down_/v_up_: the value residual's gate (later layers only)
  torch::Tensor x_r_, x_w_, x_k_, x_v_, x_a_, x_g_, k_k_, k_a_, r_k_, g_norm_weight_, g_norm_bias_;
};

// Forward FLOPs per token of the token mixing: the DPLR chunk builds four decayed score matrices (r·k, r·b, a·k,
// a·b) and reads the state twice (W S, r S), about three times the single-score chunked recurrence.
static double rwkv7_flops(const MixingFlopsQuery& q) { return 3.0 * chunked_recurrence_flops(q); }

void register_rwkv7_family(Registry& r) {
  MixerFamily rwkv7 = make_mixer_family<Rwkv7Args, Rwkv7Mixer>(
      "rwkv7", "RWKV-7 Goose: generalised delta rule with a diagonal-plus-low-rank transition (docs/models.md#rwkv-7)",
      {rwkv7_flops, {"recent linear memories", "olive"}, 2e-3, {rwkv7_fla_names()},
       {{"num_heads", "heads; 0: the model's n_heads"},
        {"head_dim", "key and value width per head; 0: d_model / heads"},
        {"decay_low_rank_dim", "rank of the decay's low-rank projection; 0: max(32, round(2.5 sqrt(d_model) d_h / 64 "
                               "/ 32) 32), as the released models"},
        {"a_low_rank_dim", "rank of the in-context learning rate a's projection; 0: as decay_low_rank_dim"},
        {"gate_low_rank_dim", "rank of the output gate's projection; 0: max(32, round(5 sqrt(d_model) / 32) 32)"},
        {"v_low_rank_dim", "rank of the value residual's gate projection; 0: max(32, round(1.7 sqrt(d_model) d_h / "
                           "64 / 32) 32)"},
        {"value_residual", "the layers after the model's first rwkv7 layer mix its values into their own (RWKV-7's "
                           "value residual)"},
        {"group_norm_eps", "the output group norm's epsilon is head_dim x group_norm_eps"},
        {"rwkv7_sub_chunk", "rows per block of the decayed score matrices when the decays do not factorise (memory "
                            "and speed only)"}}});
  // The rwkv7 model is RWKV-7's block (arXiv 2503.14456 §4): LayerNorm, a norm after the embedding and the ReLU²
  // channel mix as the feed-forward part.
  // and the norms' eps 1e-5 (RWKV's; fla's RWKV-7 takes one eps for the block norms and the output group norm).
  rwkv7.model_overrides = {{"block_norm", "layernorm"}, {"embed_norm", true}, {"block_ffn", "rwkv_channel_mix"},
                           {"norm_eps", 1e-5}};
  r.add_mixer(std::move(rwkv7));
}

}  // namespace mnemo
