// `log_linear_gdn` mixer: Log-Linear Gated DeltaNet (docs/models.md#log-linear-gated-deltanet; arXiv 2506.04761 §4,
// the reference code's log-linear Gated DeltaNet layer): Gated DeltaNet's layer (runtime/delta_rule/mixer.cpp) with
// the level weights λ added:
//   q = l2norm(SiLU(Conv4(x W_q))), k = l2norm(SiLU(Conv4(x W_k))), v = SiLU(Conv4(x W_v))     (per head)
//   β = σ(x w_b + b_b),  g = −exp(A_log) · softplus(x w_a + dt_bias),  A ~ U(0, 16)
//   λ_t^(ℓ) = softplus(L_{h,ℓ} · (x W_λ)_{h,ℓ}), ℓ < num_levels, L initialised to 1 (the reference's "positive" mode)
//   y = log-linear gated delta rule (runtime/log_linear_gdn/log_linear_gdn.h), q scaled by d_k^-1/2, states in fp32
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) )       (plain RMSNorm without output_gate)
// Decode state: "memory" [B, H, num_levels, d_k, d_v] (the Fenwick level states; the position is LayerState::pos)
// and the conv caches "conv_q", "conv_k", "conv_v": O(log T) in T.
// flash-linear-attention 0.6.0 has no log-linear Gated DeltaNet model, so there is no fla checkpoint format for this
// family (its log_linear_mamba2 is the family runtime/log_linear_mamba2/).
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct LogLinearGdnArgs {
  int64_t num_heads = 0;  // 0: the model's n_heads
  int64_t head_dim = 0;   // d_k; 0: d_model / heads
  double expand_v = 2.0;  // d_v = expand_v · d_k
  int64_t conv_size = 4;
  bool use_short_conv = true;
  // Level weights per head: levels >= num_levels − 1 share the top weight (one state). 15 gives every level of
  // 16384 tokens its own weight (the reference code's default).
  int64_t num_levels = 15;
  int64_t chunk_size = 64;     // speed knob only (a power of two): the chunked form is exact
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
  bool output_gate = true;
  double a_init_min = 0.0;
  double a_init_max = 16.0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogLinearGdnArgs, num_heads, head_dim, expand_v, conv_size,
                                                use_short_conv, num_levels, chunk_size, form, output_gate, a_init_min,
                                                a_init_max)

class LogLinearGdnMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  LogLinearGdnMixer(const MixerContext& ctx, const LogLinearGdnArgs& a) : args_(a) {
    const std::string fam = "log_linear_gdn";
    check_kernel_form(fam, a.form, a.chunk_size);
    if ((a.chunk_size & (a.chunk_size - 1)) != 0)
      throw Error(fam + ": chunk_size must be a power of two, got " + std::to_string(a.chunk_size));
    if (a.conv_size < 1) throw Error(fam + ": conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.num_levels < 1) throw Error(fam + ": num_levels must be >= 1, got " + std::to_string(a.num_levels));
    if (a.num_heads < 0 || a.head_dim < 0)
      throw Error(fam + ": num_heads and head_dim must be >= 0 (0 = automatic), got " + std::to_string(a.num_heads) +
                  " and " + std::to_string(a.head_dim));
    if (!(a.a_init_min >= 0 && a.a_init_max > a.a_init_min))
      throw Error(fam + ": need 0 <= a_init_min < a_init_max, got " + std::to_string(a.a_init_min) + ", " +
                  std::to_string(a.a_init_max));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (H_ < 1) throw Error(fam + ": number of heads must be >= 1, got " + std::to_string(H_));
    if (a.head_dim > 0) {
      dk_ = a.head_dim;
    } else {
      if (ctx.d_model % H_ != 0)
        throw Error(fam + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " + std::to_string(H_) +
                    " heads (set head_dim)");
      dk_ = ctx.d_model / H_;
    }
    const double dv = a.expand_v * static_cast<double>(dk_);
    if (!(a.expand_v > 0) || std::abs(dv - std::round(dv)) > 1e-9 || std::round(dv) < 1)
      throw Error(fam + ": expand_v " + std::to_string(a.expand_v) + " times head_dim " + std::to_string(dk_) +
                  " must be a positive integer");
    dv_ = static_cast<int64_t>(std::round(dv));
    auto proj = [&](int64_t dim, bool l2, const std::string& name) {
      return register_module(name + "_proj", HeadProjection(template_projection(ctx.d_model, H_, dim, a.use_short_conv,
                                                                                a.conv_size, l2), name));
    };
    q_proj_ = proj(dk_, true, "q");
    k_proj_ = proj(dk_, true, "k");
    v_proj_ = proj(dv_, false, "v");
    b_proj_ = register_module("b_proj", make_linear(ctx.d_model, H_, true));
    a_proj_ = register_module("a_proj", make_linear(ctx.d_model, H_));
    l_proj_ = register_module("l_proj", make_linear(ctx.d_model, H_ * a.num_levels, false));
    if (a.output_gate) {
      gated_output_ = register_module("output", GatedOutput(ctx.d_model, H_, dv_));
    } else {
      norm_ = register_module("norm", RMSNorm(dv_));
      o_proj_ = register_module("o_proj", make_linear(H_ * dv_, ctx.d_model));
    }
    torch::NoGradGuard no_grad;
    A_log_ = register_parameter("A_log", init_a_log(H_, std::max(a.a_init_min, 1e-6), a.a_init_max));
    dt_bias_ = register_parameter("dt_bias", init_dt_bias(H_));
    level_scale_ = register_parameter("L", torch::ones({H_, a.num_levels}));
  }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "dt_bias", "L"}; }
  bool decode_step_is_static() const override { return true; }  // the position kept on the device

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1), NL = args_.num_levels;
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    const auto dt = recurrence_dtype(x);
    auto beta = torch::sigmoid(b_proj_(x).to(dt));  // [B, T, H]
    auto g = -A_log_.to(dt).exp() * torch::softplus(a_proj_(x).to(dt) + dt_bias_.to(dt));
    auto lam = torch::softplus(level_scale_.to(dt) * l_proj_(x).to(dt).view({B, T, H_, NL}));  // [B, T, H, NL]

    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto o = log_linear_layer_call(q, k, v, beta, g, lam, state, scale, args_.form, args_.chunk_size);
    auto y = o.to(x.scalar_type());  // [B, T, H, d_v]
    if (gated_output_) return gated_output_(y, x);
    return o_proj_(norm_(y).reshape({B, T, H_ * dv_}));
  }

 private:
  LogLinearGdnArgs args_;
  int64_t H_ = 0, dk_ = 0, dv_ = 0;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear b_proj_{nullptr}, a_proj_{nullptr}, l_proj_{nullptr}, o_proj_{nullptr};
  torch::Tensor A_log_, dt_bias_, level_scale_;
  GatedOutput gated_output_{nullptr};
  RMSNorm norm_{nullptr};
};

torch::Tensor log_linear_layer_call(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& beta, const torch::Tensor& g,
                                    const torch::Tensor& level_weights, LayerState* state, double scale,
                                    const std::string& form, int64_t chunk_size) {
  const int64_t T = q.size(1);
  auto h0 = state_or_empty(state, "memory");
  LogLinearResult r;
  if (state && T == 1 && h0.defined() && static_decode_active()) {
    const auto position = state->has("position") ? state->at("position")
                                                 : torch::full({1}, state->pos, q.options().dtype(torch::kLong));
    r = log_linear_gdn_static_step(q, k, v, beta, g, level_weights, h0, position, scale);
    state->tensors["position"] = position + 1;
  } else {
    const int64_t start = state ? state->pos : 0;
    r = use_chunked_kernel(form, state, T)
            ? log_linear_gdn_chunk(q, k, v, beta, g, level_weights, h0, start, scale, chunk_size, state != nullptr)
            : log_linear_gdn_recurrent(q, k, v, beta, g, level_weights, h0, start, scale);
    if (state) state->tensors["position"] = torch::full({1}, start + T, q.options().dtype(torch::kLong));
  }
  if (state) state->tensors["memory"] = r.final_state.detach();
  return r.o;
}

double log_linear_mixing_flops(const MixingFlopsQuery& q) {
  const int64_t C = q.args.is_object() && q.args.contains("chunk_size") ? q.args["chunk_size"].get<int64_t>() : 64;
  const int64_t NL = q.args.is_object() && q.args.contains("num_levels") ? q.args["num_levels"].get<int64_t>() : 15;
  const int64_t n = std::max<int64_t>(q.positions, 1);
  double levels = 0;
  for (int64_t t = q.first_position; t < q.first_position + n; ++t) {
    const auto idx = static_cast<unsigned long long>(q.decode ? t : t / std::max<int64_t>(C, 1));
    levels += static_cast<double>(std::min<int64_t>(1 + __builtin_popcountll(idx), NL));
  }
  levels /= static_cast<double>(n);
  if (q.decode) return 4.0 * q.d_model * q.head_dim * levels;
  return 2.0 * static_cast<double>(C) * q.d_model + 4.0 * q.d_model * q.head_dim * levels;
}

void register_log_linear_gdn_family(Registry& r) {
  r.add_mixer(make_mixer_family<LogLinearGdnArgs, LogLinearGdnMixer>(
      "log_linear_gdn",
      "Log-Linear Gated DeltaNet: Gated DeltaNet over Fenwick-tree level states with learned level weights "
      "(docs/models.md#log-linear-gated-deltanet)",
      {log_linear_mixing_flops,
       {"recent linear memories", "cyan"},
       1.6e-2,
       {},
       {{"num_levels", "level weights per head (Fenwick levels of the prefix); levels >= num_levels - 1 share the top "
                       "weight and state (docs/models.md#log-linear-gated-deltanet)"},
        {"chunk_size", "tokens per chunk of the chunked form, a power of two; speed only, the chunked form is exact"}}}));
}

}  // namespace mnemo
