// `log_linear_mamba2` mixer: log-linear Mamba-2 (docs/models.md#log-linear-mamba-2; Guo et al., "Log-Linear
// Attention", arXiv 2506.04761 §4; flash-linear-attention's LogLinearMamba2 layer): Mamba2's layer
// (runtime/mamba2/mixer.cpp) over the log-linear kernel in scalar-decay mode (runtime/log_linear_gdn/log_linear_gdn.h):
//   in_proj(x) -> [z, xBC, dt, dl]; xBC = SiLU(Conv4(xBC) + bias) -> [x, B, C]
//   dt = softplus(dt + dt_bias), A = −exp(A_log), g_t = A dt_t (per head), λ_t^(ℓ) = softplus(L_{h,ℓ} · dl_{t,h,ℓ})
//   y = log-linear attention with q = C, k = B (shared by the heads of a group), v = dt ⊙ x, decay g, level
//       weights λ, scale 1; y += D ⊙ x
//   out = out_proj(RMSNorm_group(y ⊙ SiLU(z)))
// (conv_bias and proj_bias switch the conv's bias off and biases on in_proj / out_proj on, as fla's use_conv_bias and
// use_bias do.)
// Heads = d_inner / mamba_head_dim (the model's n_heads is not used). The fla block around it is Transformer++'s
// pre-norm block with its SwiGLU MLP.
// Decode state: "memory" [B, H, num_levels, d_state, head_dim] (the Fenwick level states; the position is
// LayerState::pos) and the conv cache "conv_xBC": O(log T) in T.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"
#include "runtime/log_linear_mamba2/fla_names.h"
#include "runtime/mamba2/mamba2.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct LogLinearMamba2Args {
  int64_t chunk_size = 64;     // speed knob only (a power of two): the chunked form is exact
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
  double mamba_expand = 2.0;   // d_inner = expand · d_model
  int64_t mamba_head_dim = 64;
  int64_t mamba_d_state = 128;
  int64_t mamba_ngroups = 1;
  int64_t conv_size = 4;
  bool conv_bias = true;   // a bias on the conv over xBC (fla's use_conv_bias; its model config's default)
  bool proj_bias = false;  // biases on in_proj and out_proj (fla's use_bias; its model config's default)
  // Level weights per head: levels >= num_levels − 1 share the top weight (one state); 15 gives every level of
  // 16384 tokens its own weight (fla's MAX_NUM_LEVELS).
  int64_t num_levels = 15;
  double mamba_a_min = 1.0, mamba_a_max = 16.0;  // A ~ U(a_min, a_max); fla's layer: A_h = h
  double mamba_dt_min = 1e-3, mamba_dt_max = 1e-1, mamba_dt_floor = 1e-4;
  double mamba_norm_eps = 1e-5;  // eps of the gated group RMSNorm (fla's norm_eps)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LogLinearMamba2Args, chunk_size, form, mamba_expand, mamba_head_dim,
                                                mamba_d_state, mamba_ngroups, conv_size, conv_bias, proj_bias,
                                                num_levels, mamba_a_min, mamba_a_max, mamba_dt_min, mamba_dt_max,
                                                mamba_dt_floor, mamba_norm_eps)

class LogLinearMamba2Mixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  LogLinearMamba2Mixer(const MixerContext& ctx, const LogLinearMamba2Args& a) : args_(a) {
    const std::string fam = "log_linear_mamba2";
    check_kernel_form(fam, a.form, a.chunk_size);
    if ((a.chunk_size & (a.chunk_size - 1)) != 0)
      throw Error(fam + ": chunk_size must be a power of two, got " + std::to_string(a.chunk_size));
    if (a.conv_size < 1) throw Error(fam + ": conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.num_levels < 1) throw Error(fam + ": num_levels must be >= 1, got " + std::to_string(a.num_levels));
    check_mamba_dt_and_norm(fam, a.mamba_dt_min, a.mamba_dt_max, a.mamba_norm_eps);
    if (!(a.mamba_a_min > 0 && a.mamba_a_max >= a.mamba_a_min))
      throw Error(fam + ": need 0 < mamba_a_min <= mamba_a_max, got " + std::to_string(a.mamba_a_min) + ", " +
                  std::to_string(a.mamba_a_max));
    const MambaHeads h = mamba_heads(fam, ctx.d_model, a.mamba_expand, a.mamba_head_dim, a.mamba_ngroups, a.mamba_d_state);
    d_inner_ = h.d_inner, P_ = h.P, H_ = h.H, G_ = h.G, N_ = h.N;
    const int64_t conv_channels = d_inner_ + 2 * G_ * N_;
    in_proj_ = register_module(
        "in_proj", make_linear(ctx.d_model, d_inner_ + conv_channels + H_ + H_ * a.num_levels, a.proj_bias));
    conv_ = register_module("conv", ShortConv(conv_channels, a.conv_size, /*silu=*/false));
    if (a.conv_bias) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(a.conv_size));  // PyTorch Conv1d default
      conv_bias_ = register_parameter("conv_bias", torch::empty({conv_channels}).uniform_(-bound, bound));
    }
    A_log_ = register_parameter("A_log", init_a_log(H_, a.mamba_a_min, a.mamba_a_max));
    dt_bias_ = register_parameter("dt_bias", init_dt_bias(H_, a.mamba_dt_min, a.mamba_dt_max, a.mamba_dt_floor));
    level_scale_ = register_parameter("L", torch::ones({H_, a.num_levels}));
    D_ = register_parameter("D", torch::ones({H_}));
    norm_weight_ = register_parameter("norm_weight", torch::ones({d_inner_}));
    out_proj_ = register_module("out_proj", make_linear(d_inner_, ctx.d_model, a.proj_bias));
  }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "dt_bias", "L", "D"}; }
  bool decode_step_is_static() const override { return true; }  // the position kept on the device

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1), NL = args_.num_levels;
    auto proj = in_proj_(x);
    auto z = proj.narrow(-1, 0, d_inner_);
    auto xBC = proj.narrow(-1, d_inner_, d_inner_ + 2 * G_ * N_);
    auto dt_raw = proj.narrow(-1, 2 * d_inner_ + 2 * G_ * N_, H_);
    auto dl = proj.narrow(-1, 2 * d_inner_ + 2 * G_ * N_ + H_, H_ * NL);
    xBC = conv_(xBC, state, "conv_xBC");
    if (conv_bias_.defined()) xBC = xBC + conv_bias_.to(x.scalar_type());
    xBC = torch::silu(xBC);
    auto xs = xBC.narrow(-1, 0, d_inner_).view({B, T, H_, P_});
    auto Bm = xBC.narrow(-1, d_inner_, G_ * N_).view({B, T, G_, N_});
    auto Cm = xBC.narrow(-1, d_inner_ + G_ * N_, G_ * N_).view({B, T, G_, N_});
    if (G_ != H_) {
      Bm = Bm.repeat_interleave(H_ / G_, 2);
      Cm = Cm.repeat_interleave(H_ / G_, 2);
    }
    const auto ct = recurrence_dtype(x);
    auto dt = torch::softplus(dt_raw.to(ct) + dt_bias_.to(ct));  // [B, T, H]
    auto g = -A_log_.to(ct).exp() * dt;
    auto lam = torch::softplus(level_scale_.to(ct) * dl.to(ct).view({B, T, H_, NL}));  // [B, T, H, NL]
    auto v = xs.to(ct) * dt.unsqueeze(-1);
    const torch::Tensor no_beta;  // scalar-decay mode: log-linear Mamba-2
    auto o = log_linear_layer_call(Cm, Bm, v, no_beta, g, lam, state, 1.0, args_.form, args_.chunk_size);
    auto y = o.to(x.scalar_type()) + xs * D_.to(x.scalar_type()).view({1, 1, H_, 1});
    return out_proj_(mamba_gated_norm(y.reshape({B, T, d_inner_}), z, norm_weight_, G_, args_.mamba_norm_eps));
  }

 private:
  LogLinearMamba2Args args_;
  int64_t d_inner_ = 0, P_ = 0, H_ = 0, G_ = 0, N_ = 0;
  torch::nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  ShortConv conv_{nullptr};
  torch::Tensor conv_bias_, A_log_, dt_bias_, level_scale_, D_, norm_weight_;
};

void register_log_linear_mamba2_family(Registry& r) {
  r.add_mixer(make_mixer_family<LogLinearMamba2Args, LogLinearMamba2Mixer>(
      "log_linear_mamba2",
      "Log-linear Mamba-2: Mamba2's layer over Fenwick-tree level states with learned level weights "
      "(docs/models.md#log-linear-mamba-2)",
      {log_linear_mixing_flops,
       {"recent linear memories", "orange"},
       1.6e-2,
       {log_linear_mamba2_fla_names()},
       {{"num_levels", "level weights per head (Fenwick levels of the prefix); levels >= num_levels - 1 share the top "
                       "weight and state (docs/models.md#log-linear-mamba-2)"},
        {"conv_bias", "a bias on the short conv over x, B, C (fla's use_conv_bias)"},
        {"proj_bias", "biases on in_proj and out_proj (fla's use_bias)"},
        {"mamba_a_min", "the decay rate A ~ U(mamba_a_min, mamba_a_max) at initialisation, A_log = log A"},
        {"mamba_a_max", "upper end of A's initial range (see mamba_a_min)"},
        {"chunk_size", "tokens per chunk of the chunked form, a power of two; speed only, the chunked form is exact"}}}));
}

}  // namespace mnemo
