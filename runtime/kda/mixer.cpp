// `kda` mixer: Kimi Delta Attention (docs/models.md#kda; Kimi Linear, arXiv 2510.26692 §3, and flash-linear-attention's
// KimiDeltaAttention layer for the parameterisation):
//   q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = SiLU(Conv4(x W_v))                       (per head)
//   g = −exp(A_log_h) · softplus((x W_f↓) W_f↑ + dt_bias)   per key channel, W_f↓: d → d_v, W_f↑: d_v → H·d_k
//   β = σ(x w_b)  (× 2 with allow_neg_eigval),  A ~ U(1, 16), dt_bias = softplus⁻¹(dt), dt ∈ [1e-3, 0.1]
//   y = KDA recurrence (runtime/kda/kda.h), q scaled by d_k^-1/2, state [B, H, d_k, d_v] in fp32
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ σ(((x W_g↓) W_g↑ + b_g)_h) )   (sigmoid output gate, low-rank W_g)
// Decode state: "memory" [B, H, d_k, d_v] and the conv caches "conv_q", "conv_k", "conv_v".
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kda/kda.h"
#include "runtime/kernels/precision.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/kda/fla_names.h"
#include "runtime/registry.h"

namespace mnemo {

struct KdaArgs {
  int64_t num_heads = 0;  // 0: the model's n_heads
  int64_t head_dim = 0;   // d_k; 0: d_model / heads
  double expand_v = 1.0;  // d_v = expand_v · d_k
  int64_t conv_size = 4;
  bool use_short_conv = true;
  int64_t chunk_size = 64;     // speed knob only: the chunk form is exact
  // Rows per block of the per-channel decayed score matrices when the decays are too strong to factorise: training
  // memory at T 2048 (mnemo bench --model kda, one thread) 613 / 382 / 333 MB at 16 / 8 / 4, Gated DeltaNet 223 MB.
  int64_t kda_sub_chunk = 8;
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
  bool allow_neg_eigval = false;
  double a_init_min = 1.0;  // A ~ U(a_init_min, a_init_max), A_log = log A
  double a_init_max = 16.0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(KdaArgs, num_heads, head_dim, expand_v, conv_size, use_short_conv,
                                                chunk_size, kda_sub_chunk, form, allow_neg_eigval, a_init_min, a_init_max)

class KdaMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  KdaMixer(const MixerContext& ctx, const KdaArgs& a) : args_(a) {
    check_kernel_form("kda", a.form, a.chunk_size);
    if (a.conv_size < 1) throw Error("kda: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.kda_sub_chunk < 1) throw Error("kda: kda_sub_chunk must be >= 1, got " + std::to_string(a.kda_sub_chunk));
    if (!(a.a_init_min > 0 && a.a_init_max > a.a_init_min))
      throw Error("kda: need 0 < a_init_min < a_init_max, got " + std::to_string(a.a_init_min) + ", " +
                  std::to_string(a.a_init_max));
    if (a.num_heads < 0 || a.head_dim < 0)
      throw Error("kda: num_heads and head_dim must be >= 0 (0 = automatic), got " + std::to_string(a.num_heads) +
                  " and " + std::to_string(a.head_dim));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      dk_ = a.head_dim;
    } else {
      if (H_ < 1 || ctx.d_model % H_ != 0)
        throw Error("kda: d_model " + std::to_string(ctx.d_model) + " is not divisible by " + std::to_string(H_) +
                    " heads (set head_dim)");
      dk_ = ctx.d_model / H_;
    }
    const double dv = a.expand_v * static_cast<double>(dk_);
    if (!(a.expand_v > 0) || std::abs(dv - std::round(dv)) > 1e-9 || std::round(dv) < 1)
      throw Error("kda: expand_v " + std::to_string(a.expand_v) + " times head_dim " + std::to_string(dk_) +
                  " must be a positive integer");
    dv_ = static_cast<int64_t>(std::round(dv));

    q_proj_ = register_module("q_proj", HeadProjection(template_projection(ctx.d_model, H_, dk_, a.use_short_conv,
                                                                            a.conv_size, true), "q"));
    k_proj_ = register_module("k_proj", HeadProjection(template_projection(ctx.d_model, H_, dk_, a.use_short_conv,
                                                                            a.conv_size, true), "k"));
    v_proj_ = register_module("v_proj", HeadProjection(template_projection(ctx.d_model, H_, dv_, a.use_short_conv,
                                                                            a.conv_size, false), "v"));
    f_down_ = register_module("f_down", make_linear(ctx.d_model, dv_));
    f_up_ = register_module("f_up", make_linear(dv_, H_ * dk_));
    b_proj_ = register_module("b_proj", make_linear(ctx.d_model, H_));
    g_down_ = register_module("g_down", make_linear(ctx.d_model, dv_));
    g_up_ = register_module("g_up", make_linear(dv_, H_ * dv_, /*bias=*/true));
    norm_ = register_module("norm", RMSNorm(dv_));
    o_proj_ = register_module("o_proj", make_linear(H_ * dv_, ctx.d_model));
    torch::NoGradGuard no_grad;
    A_log_ = register_parameter("A_log", init_a_log(H_, a.a_init_min, a.a_init_max));
    dt_bias_ = register_parameter("dt_bias", init_dt_bias(H_ * dk_));  // softplus⁻¹ of dt ∈ [1e-3, 0.1], per channel
  }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "dt_bias"}; }

  // Decode: the conv caches and the recurrent state: fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    const auto dt = recurrence_dtype(x);
    auto beta = torch::sigmoid(b_proj_(x).to(dt));  // [B, T, H]
    if (args_.allow_neg_eigval) beta = beta * 2.0;
    // Per-channel log decay in the recurrence precision (docs/models.md#numerical-stability rule 2).
    auto f = f_up_(f_down_(x)).to(dt) + dt_bias_.to(dt);
    auto g = (-A_log_.to(dt).exp().view({H_, 1}) * torch::softplus(f.view({B, T, H_, dk_})));

    auto h0 = state_or_empty(state, "memory");
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    auto r = use_chunked_kernel(args_.form, state, T)
                 ? kda_chunk(q, k, v, beta, g, h0, scale, args_.chunk_size, args_.kda_sub_chunk)
                 : kda_recurrent(q, k, v, beta, g, h0, scale);
    if (state) state->tensors["memory"] = r.final_state.detach();

    auto y = r.o.to(x.scalar_type());                                   // [B, T, H, d_v]
    auto gate = torch::sigmoid(g_up_(g_down_(x)).view({B, T, H_, dv_}));  // sigmoid output gate
    return o_proj_((norm_(y) * gate).reshape({B, T, H_ * dv_}));
  }

 private:
  KdaArgs args_;
  int64_t H_ = 0, dk_ = 0, dv_ = 0;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear f_down_{nullptr}, f_up_{nullptr}, b_proj_{nullptr}, g_down_{nullptr}, g_up_{nullptr},
      o_proj_{nullptr};
  RMSNorm norm_{nullptr};
  torch::Tensor A_log_, dt_bias_;
};

void register_kda_family(Registry& r) {
  r.add_mixer(make_mixer_family<KdaArgs, KdaMixer>(
      "kda", "Kimi Delta Attention: gated delta rule with a decay per key channel (docs/models.md#kda)",
      {chunked_recurrence_flops,
       {"recent linear memories", "blue", {{"allow_neg_eigval", "allow_neg_eigval"}}},
       2e-3,
       {kda_fla_names()},
       {{"kda_sub_chunk", "rows per block of the per-channel decayed score matrices when the decays do not "
                          "factorise (memory and speed only)"}}}));
}

}  // namespace mnemo
