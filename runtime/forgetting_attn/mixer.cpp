// `fox` mixer: the Forgetting Transformer's attention (docs/models.md#forgetting-transformer; arXiv 2503.02130 §2,
// with flash-linear-attention's ForgettingAttention layer for the parameterisation):
//   q = x W_q, k = x W_k, v = x W_v (per head; per-head RMSNorm on q and k with qk_norm), no RoPE (use_rope: rotary
//   q and k after the norms, as transformer_pro)
//   log f_t = logsigmoid(x w_f + b_f) per head, c_t = Σ_{s<=t} log f_s
//   o_i = Σ_{j<=i} softmax_j(q_i·k_j / √d_h + c_i − c_j) v_j
//   out = W_o(o), or W_o(σ(x W_g) ⊙ o) with use_output_gate
// The paper's Pro block (§4, the official code's use_k_shift / use_v_shift / use_output_norm; `fox_pro`) adds:
//   a data-dependent token shift of keys and values, k_t = α_t k̃_{t−1} + (1 − α_t) k̃_t with k̃ = x W_k,
//     α_t = σ(x_t w_α) per head (no bias; k̃ before the first token is 0), and likewise v with its own w_α;
//   QK-norm with a weight per channel (the GroupNorm over heads of the official code and fla, eps 1e-5;
//     qk_norm_per_channel), and
//   an output norm: o ← RMSNorm_h(o) ⊙ w_o per head (a weight per channel, eps 1e-6) before the output gate.
// b_f starts at 0 (log f ≈ −0.69 a token), as in flash-linear-attention and the official code's data-dependent gate;
// with fgate_decay_time_min/max > 0 head h starts at b_f = −log(expm1(1/T_h)), i.e. log σ(b_f) = −1/T_h, the decay
// times T_h log-spaced from min to max over the heads (the official code's fgate_bias_init, there for its
// data-independent gates).
// Decode state: the key/value cache "k", "v" [B, T, H, D] and the keys' cumulative log forget gates "c" [B, T, H]
// (a KV cache: the state grows with the context, as softmax attention's does); with the token shifts also the last
// unshifted key / value "k_shift", "v_shift" [B, 1, H, D].
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/forgetting_attn/forgetting_attn.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"
#include "runtime/mixing_flops.h"
#include "runtime/forgetting_attn/fla_names.h"
#include "runtime/registry.h"

namespace mnemo {

struct FoxArgs {
  int64_t q_block = 256;       // queries per block of the parallel form
  bool qk_norm = false;        // per-head RMSNorm on q and k
  bool use_output_gate = false;  // σ(x W_g) on the attention output
  double fgate_decay_time_min = 0, fgate_decay_time_max = 0;  // 0: b_f = 0; else the initial decay times in tokens
  bool qk_norm_per_channel = false;  // QK-norm's weight per channel (eps 1e-5), not one per head dim for all heads
  bool use_output_norm = false;      // per-head RMSNorm of the attention output, a weight per channel
  bool use_k_shift = false;          // data-dependent token shift of the keys
  bool use_v_shift = false;          // data-dependent token shift of the values
  bool use_forget_gate = true;       // false: no forget gate (c = 0), plain causal softmax attention
  bool use_rope = false;             // rotary positions on q and k (after the QK-norm)
  double rope_theta = 10000.0;
};
#define MNEMO_FOX_ARG_FIELDS                                                                                      \
  q_block, qk_norm, use_output_gate, fgate_decay_time_min, fgate_decay_time_max, qk_norm_per_channel,             \
      use_output_norm, use_k_shift, use_v_shift, use_forget_gate, use_rope, rope_theta
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FoxArgs, MNEMO_FOX_ARG_FIELDS)

// The Pro block's switches on (arXiv 2503.02130 §4 and the official code's Pro configurations).
struct FoxProArgs : FoxArgs {
  FoxProArgs() {
    qk_norm = qk_norm_per_channel = use_output_gate = use_output_norm = use_k_shift = use_v_shift = true;
  }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FoxProArgs, MNEMO_FOX_ARG_FIELDS)

// The FoX paper's "Transformer (Pro)" baseline: the Pro block without the forget gate and with RoPE at base 500 000
// (the official code builds it the same way, from its FoX layer: fgate_type "none", use_rope true).
struct TransformerProArgs : FoxProArgs {
  TransformerProArgs() {
    use_forget_gate = false;
    use_rope = true;
    rope_theta = 500000.0;
  }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TransformerProArgs, MNEMO_FOX_ARG_FIELDS)
#undef MNEMO_FOX_ARG_FIELDS

constexpr double kFoxQkNormPerChannelEps = 1e-5;  // the official code's GroupNorm default
constexpr double kFoxOutputNormEps = 1e-6;        // its norm_eps

// The data-dependent token shift: y_t = α_t x_{t−1} + (1 − α_t) x_t per head, x [B, T, H, D], alpha [B, T, H];
// x_{−1} = `previous` [B, 1, H, D] (the last x of the previous piece), or 0 when undefined.
static torch::Tensor token_shift(const torch::Tensor& x, const torch::Tensor& alpha, const torch::Tensor& previous) {
  const int64_t T = x.size(1);
  auto first = previous.defined() ? previous.to(x.scalar_type()) : torch::zeros_like(x.narrow(1, 0, 1));
  auto shifted = T > 1 ? torch::cat({first, x.narrow(1, 0, T - 1)}, 1) : first;
  auto a = alpha.unsqueeze(-1);
  return (a * shifted + (1 - a) * x).to(x.scalar_type());
}

// The forget gate's initial bias per head: −log(expm1(1/T_h)), T_h = exp(linspace(log t_min, log t_max, H)).
static torch::Tensor fgate_bias_for_decay_times(double t_min, double t_max, int64_t heads) {
  auto log_t = torch::linspace(std::log(t_min), std::log(t_max), heads, torch::kFloat64);
  return -torch::log(torch::expm1(1.0 / torch::exp(log_t)));
}

class FoxMixer : public Mixer {
 public:
  FoxMixer(const MixerContext& ctx, const FoxArgs& a) : args_(a) {
    if (a.q_block < 1) throw Error("fox: q_block must be >= 1, got " + std::to_string(a.q_block));
    H_ = ctx.n_heads;
    D_ = head_dim_of("fox", ctx.d_model, H_);
    const double t_min = a.fgate_decay_time_min, t_max = a.fgate_decay_time_max;
    const bool decay_init = t_min != 0 || t_max != 0;
    if (decay_init && !a.use_forget_gate)
      throw Error("fox: fgate_decay_time_min/max set with use_forget_gate false (there is no gate to start)");
    if (decay_init && !(t_min > 0 && t_max >= t_min && std::isfinite(t_max)))
      throw Error("fox: fgate_decay_time_min and fgate_decay_time_max must both be 0 (b_f = 0) or finite with 0 < min "
                  "<= max, got " + std::to_string(t_min) + " and " + std::to_string(t_max));
    q_proj_ = register_module("q_proj", make_linear(ctx.d_model, ctx.d_model));
    k_proj_ = register_module("k_proj", make_linear(ctx.d_model, ctx.d_model));
    v_proj_ = register_module("v_proj", make_linear(ctx.d_model, ctx.d_model));
    if (a.use_rope && D_ % 2 != 0) throw Error("fox: use_rope needs an even head dim, got " + std::to_string(D_));
    if (a.use_forget_gate) f_proj_ = register_module("f_proj", make_linear(ctx.d_model, H_, /*bias=*/true));
    if (decay_init) {
      torch::NoGradGuard no_grad;
      f_proj_->bias.copy_(fgate_bias_for_decay_times(t_min, t_max, H_));
    }
    o_proj_ = register_module("o_proj", make_linear(ctx.d_model, ctx.d_model));
    if (a.use_output_gate) g_proj_ = register_module("g_proj", make_linear(ctx.d_model, ctx.d_model));
    if (a.qk_norm_per_channel && !a.qk_norm) throw Error("fox: qk_norm_per_channel needs qk_norm true");
    if (a.qk_norm && a.qk_norm_per_channel) {
      q_norm_weight_ = register_parameter("q_norm_weight", torch::ones({ctx.d_model}));
      k_norm_weight_ = register_parameter("k_norm_weight", torch::ones({ctx.d_model}));
    } else if (a.qk_norm) {
      q_norm_ = register_module("q_norm", RMSNorm(D_));
      k_norm_ = register_module("k_norm", RMSNorm(D_));
    }
    if (a.use_output_norm) o_norm_weight_ = register_parameter("o_norm_weight", torch::ones({ctx.d_model}));
    if (a.use_k_shift) k_shift_proj_ = register_module("k_shift_proj", make_linear(ctx.d_model, H_));
    if (a.use_v_shift) v_shift_proj_ = register_module("v_shift_proj", make_linear(ctx.d_model, H_));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x).view({B, T, H_, D_}), k = k_proj_(x).view({B, T, H_, D_});
    auto v = v_proj_(x).view({B, T, H_, D_});
    if (args_.use_k_shift) k = shift(k, k_shift_proj_, x, state, "k_shift");
    if (args_.use_v_shift) v = shift(v, v_shift_proj_, x, state, "v_shift");
    if (args_.qk_norm && args_.qk_norm_per_channel) {
      q = rms_norm(q, q_norm_weight_.view({H_, D_}), kFoxQkNormPerChannelEps);
      k = rms_norm(k, k_norm_weight_.view({H_, D_}), kFoxQkNormPerChannelEps);
    } else if (args_.qk_norm) {
      q = q_norm_(q);
      k = k_norm_(k);
    }
    if (args_.use_rope) {  // positions continue from the tokens already in the state
      const int64_t offset = state ? state->pos : 0;
      q = apply_rope(q.transpose(1, 2), offset, args_.rope_theta).transpose(1, 2);
      k = apply_rope(k.transpose(1, 2), offset, args_.rope_theta).transpose(1, 2);
    }
    // Log forget gates from logits in the recurrence precision (docs/models.md#numerical-stability rule 2); without
    // the gate c = 0 and the attention is plain causal softmax attention.
    const auto dt = recurrence_dtype(x);
    auto c_new = args_.use_forget_gate ? torch::log_sigmoid(f_proj_(x).to(dt)).cumsum(1)  // [B, T, H]
                                       : torch::zeros({B, T, H_}, x.options().dtype(dt));
    torch::Tensor keys = k, values = v, c_keys;
    if (state && state->has("c")) {
      auto c_prev = state->at("c");
      c_new = c_new + c_prev.narrow(1, c_prev.size(1) - 1, 1);  // continue the running sum
      keys = torch::cat({state->at("k"), k}, 1);
      values = torch::cat({state->at("v"), v}, 1);
      c_keys = torch::cat({c_prev, c_new}, 1);
    } else {
      c_keys = c_new;
    }
    if (state) {
      state->tensors["k"] = keys.detach();
      state->tensors["v"] = values.detach();
      state->tensors["c"] = c_keys.detach();
    }
    auto o = forgetting_attention(q, keys, values, c_new, c_keys, 1.0 / std::sqrt(static_cast<double>(D_)),
                                  args_.q_block);
    if (args_.use_output_norm) o = rms_norm(o, o_norm_weight_.view({H_, D_}), kFoxOutputNormEps);
    o = o.reshape({B, T, H_ * D_});
    if (args_.use_output_gate) o = torch::sigmoid(g_proj_(x)) * o;
    return o_proj_(o);
  }

 private:
  // One token-shifted projection ([B, T, H, D]), continuing from the state's last unshifted row, which it updates.
  torch::Tensor shift(const torch::Tensor& projected, torch::nn::Linear& alpha_proj, const torch::Tensor& x,
                      LayerState* state, const char* key) {
    auto alpha = torch::sigmoid(alpha_proj(x).to(recurrence_dtype(x)));  // [B, T, H]
    torch::Tensor previous = state && state->has(key) ? state->at(key) : torch::Tensor();
    if (state) state->tensors[key] = projected.narrow(1, projected.size(1) - 1, 1).detach();
    return token_shift(projected, alpha, previous);
  }

  FoxArgs args_;
  int64_t H_ = 0, D_ = 0;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, f_proj_{nullptr}, o_proj_{nullptr},
      g_proj_{nullptr}, k_shift_proj_{nullptr}, v_shift_proj_{nullptr};
  RMSNorm q_norm_{nullptr}, k_norm_{nullptr};
  torch::Tensor q_norm_weight_, k_norm_weight_, o_norm_weight_;  // [d_model] = [H · D]: a weight per channel
};

// What each argument does (configuration help and docs/configuration.md), for fox and fox_pro alike.
static std::map<std::string, std::string> fox_arg_help() {
  return {{"qk_norm", "per-head RMSNorm on q and k"},
          {"qk_norm_per_channel", "QK-norm with a weight per channel (the Pro block's; eps 1e-5), not one per head "
                                  "dimension shared by the heads"},
          {"use_output_gate", "sigmoid(x W_g) on the attention output"},
          {"use_output_norm", "per-head RMSNorm of the attention output with a weight per channel, before the gate"},
          {"use_k_shift", "data-dependent token shift of the keys: k_t = a_t k_{t-1} + (1 - a_t) k_t, "
                          "a_t = sigmoid(x_t w) per head"},
          {"use_v_shift", "the same token shift on the values"},
          {"use_forget_gate", "the data-dependent forget gate; false: c = 0, plain causal softmax attention"},
          {"use_rope", "rotary positions on q and k, after the QK-norm"},
          {"fgate_decay_time_min", "0 (with max 0): the forget gate's bias starts at 0; > 0: the shortest initial decay "
                                   "time in tokens, log sigma(b_f) = -1/T over the heads"},
          {"fgate_decay_time_max", "the longest initial decay time in tokens (heads log-spaced from min to max)"}};
}

// Every argument that changes the model is a report variant (a run that sets one away from its family's default is a
// model of its own: "fox (k shift, v shift)", "fox_pro (forget gate false)").
static std::vector<ReportVariant> fox_variants() {
  return {{"fgate_decay_time_min", "gate T_min"}, {"fgate_decay_time_max", "gate T_max"},
          {"qk_norm", "QK-norm"},                 {"qk_norm_per_channel", "QK-norm per channel"},
          {"use_output_gate", "output gate"},     {"use_output_norm", "output norm"},
          {"use_k_shift", "k shift"},             {"use_v_shift", "v shift"},
          {"use_forget_gate", "forget gate"},     {"use_rope", "RoPE"},
          {"rope_theta", "RoPE base"}};
}

// The official Pro configurations shrink the feed-forward part (hidden_ratio 3.5 against 4) to pay for the gates.
static json fox_pro_model_overrides() { return {{"mlp_ratio", 3.5}}; }

void register_forgetting_attn_family(Registry& r) {
  r.add_mixer(make_mixer_family<FoxArgs, FoxMixer>(
      "fox", "Forgetting Transformer: softmax attention with a data-dependent forget gate (docs/models.md#forgetting-transformer)",
      {attention_flops,
       {"attention", "orange", fox_variants()},
       2e-3,
       {forgetting_transformer_fla_names()},
       fox_arg_help()}));
  MixerFamily pro = make_mixer_family<FoxProArgs, FoxMixer>(
      "fox_pro",
      "Forgetting Transformer, Pro block: fox with key/value token shifts, per-channel QK-norm, output norm and "
      "output gate (docs/models.md#forgetting-transformer)",
      {attention_flops,
       {"attention", "brown", fox_variants()},
       2e-3,
       {},
       fox_arg_help()});
  pro.model_overrides = fox_pro_model_overrides();
  r.add_mixer(std::move(pro));
  MixerFamily transformer_pro = make_mixer_family<TransformerProArgs, FoxMixer>(
      "transformer_pro",
      "Transformer (Pro): the Forgetting Transformer's Pro block without the forget gate, with RoPE (base 500000) "
      "(docs/models.md#forgetting-transformer)",
      {attention_flops, {"attention", "blue", fox_variants()}, 2e-3, {}, fox_arg_help()});
  transformer_pro.model_overrides = fox_pro_model_overrides();
  r.add_mixer(std::move(transformer_pro));
}

}  // namespace mnemo
