// `fox` mixer: the Forgetting Transformer's attention (docs/models.md#forgetting-transformer; arXiv 2503.02130 §2,
// with flash-linear-attention's ForgettingAttention layer for the parameterisation):
//   q = x W_q, k = x W_k, v = x W_v (per head; per-head RMSNorm on q and k with qk_norm), no RoPE
//   log f_t = logsigmoid(x w_f + b_f) per head, c_t = Σ_{s<=t} log f_s
//   o_i = Σ_{j<=i} softmax_j(q_i·k_j / √d_h + c_i − c_j) v_j
//   out = W_o(o), or W_o(σ(x W_g) ⊙ o) with use_output_gate (the paper's "Pro" block has both options on)
// b_f starts at 0 (log f ≈ −0.69 a token), as in flash-linear-attention and the official code's data-dependent gate;
// with fgate_decay_time_min/max > 0 head h starts at b_f = −log(expm1(1/T_h)), i.e. log σ(b_f) = −1/T_h, the decay
// times T_h log-spaced from min to max over the heads (the official code's fgate_bias_init, there for its
// data-independent gates).
// Decode state: the key/value cache "k", "v" [B, T, H, D] and the keys' cumulative log forget gates "c" [B, T, H]
// (a KV cache: the state grows with the context, as softmax attention's does).
#include <cmath>

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
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FoxArgs, q_block, qk_norm, use_output_gate, fgate_decay_time_min,
                                                fgate_decay_time_max)

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
    if (H_ < 1 || ctx.d_model % H_ != 0)
      throw Error("fox: d_model " + std::to_string(ctx.d_model) + " is not divisible by " + std::to_string(H_) +
                  " heads");
    D_ = ctx.d_model / H_;
    const double t_min = a.fgate_decay_time_min, t_max = a.fgate_decay_time_max;
    const bool decay_init = t_min != 0 || t_max != 0;
    if (decay_init && !(t_min > 0 && t_max >= t_min && std::isfinite(t_max)))
      throw Error("fox: fgate_decay_time_min and fgate_decay_time_max must both be 0 (b_f = 0) or finite with 0 < min "
                  "<= max, got " + std::to_string(t_min) + " and " + std::to_string(t_max));
    q_proj_ = register_module("q_proj", make_linear(ctx.d_model, ctx.d_model));
    k_proj_ = register_module("k_proj", make_linear(ctx.d_model, ctx.d_model));
    v_proj_ = register_module("v_proj", make_linear(ctx.d_model, ctx.d_model));
    f_proj_ = register_module("f_proj", make_linear(ctx.d_model, H_, /*bias=*/true));
    if (decay_init) {
      torch::NoGradGuard no_grad;
      f_proj_->bias.copy_(fgate_bias_for_decay_times(t_min, t_max, H_));
    }
    o_proj_ = register_module("o_proj", make_linear(ctx.d_model, ctx.d_model));
    if (a.use_output_gate) g_proj_ = register_module("g_proj", make_linear(ctx.d_model, ctx.d_model));
    if (a.qk_norm) {
      q_norm_ = register_module("q_norm", RMSNorm(D_));
      k_norm_ = register_module("k_norm", RMSNorm(D_));
    }
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x).view({B, T, H_, D_}), k = k_proj_(x).view({B, T, H_, D_});
    auto v = v_proj_(x).view({B, T, H_, D_});
    if (args_.qk_norm) {
      q = q_norm_(q);
      k = k_norm_(k);
    }
    // Log forget gates from logits in the recurrence precision (docs/models.md#numerical-stability rule 2).
    auto log_f = torch::log_sigmoid(f_proj_(x).to(recurrence_dtype(x)));  // [B, T, H]
    auto c_new = log_f.cumsum(1);
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
                                  args_.q_block)
                 .reshape({B, T, H_ * D_});
    if (args_.use_output_gate) o = torch::sigmoid(g_proj_(x)) * o;
    return o_proj_(o);
  }

 private:
  FoxArgs args_;
  int64_t H_ = 0, D_ = 0;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, f_proj_{nullptr}, o_proj_{nullptr},
      g_proj_{nullptr};
  RMSNorm q_norm_{nullptr}, k_norm_{nullptr};
};

void register_forgetting_attn_family(Registry& r) {
  r.add_mixer(make_mixer_family<FoxArgs, FoxMixer>(
      "fox", "Forgetting Transformer: softmax attention with a data-dependent forget gate (docs/models.md#forgetting-transformer)",
      {attention_flops,
       {"attention", "orange", {{"fgate_decay_time_min", "gate T_min"}, {"fgate_decay_time_max", "gate T_max"}}},
       2e-3,
       {forgetting_transformer_fla_names()},
       {{"qk_norm", "per-head RMSNorm on q and k"},
        {"fgate_decay_time_min", "0 (with max 0): the forget gate's bias starts at 0; > 0: the shortest initial decay "
                                 "time in tokens, log sigma(b_f) = -1/T over the heads"},
        {"fgate_decay_time_max", "the longest initial decay time in tokens (heads log-spaced from min to max)"}}}));
}

}  // namespace mnemo
