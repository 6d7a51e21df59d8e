// `mamba2` mixer (docs/models.md#mamba2, mamba_ssm Mamba2 defaults): in_proj -> [z, x, B, C, dt];
// one depthwise Conv4 with bias + SiLU over xBC; dt = softplus(dt_raw + dt_bias), A = −exp(A_log);
// SSD scan y_t = Hs_t C_tᵀ with Hs_t = e^{A dt_t} Hs_{t-1} + dt_t x_tᵀ B_t; y += D ⊙ x;
// out = out_proj(RMSNorm_group(y ⊙ SiLU(z))). Heads = d_inner / head_dim (the model's n_heads is
// not used); B and C are shared by the heads of a group.
// Decode state: "memory" Hs [B, H, P, N] (fp32; fp64 for fp64 modules) + "conv_xBC" cache.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/mamba2/mamba2.h"
#include "runtime/no_weight_decay.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

MambaHeads mamba_heads(const std::string& family, int64_t d_model, double expand, int64_t head_dim, int64_t ngroups,
                       int64_t d_state) {
  for (const auto& [field, v] : {std::pair<const char*, int64_t>{"mamba_head_dim", head_dim},
                                 {"mamba_d_state", d_state}, {"mamba_ngroups", ngroups}})
    if (v < 1) throw Error(family + ": " + field + " must be >= 1, got " + std::to_string(v));
  MambaHeads h;
  h.d_inner = expanded_head_dim(family, "mamba_expand", d_model, expand, 1);
  if (head_dim < 1 || h.d_inner % head_dim != 0)
    throw Error(family + ": d_inner = " + std::to_string(h.d_inner) + " must be a multiple of mamba_head_dim = " +
                std::to_string(head_dim));
  h.P = head_dim;
  h.H = h.d_inner / h.P;
  h.G = ngroups;
  h.N = d_state;
  if (h.G < 1 || h.H % h.G != 0)
    throw Error(family + ": heads (" + std::to_string(h.H) + ") must be a multiple of mamba_ngroups (" +
                std::to_string(h.G) + ")");
  return h;
}

torch::Tensor mamba_gated_norm(const torch::Tensor& y, const torch::Tensor& z, const torch::Tensor& weight,
                               int64_t groups, double eps) {
  const int64_t B = y.size(0), T = y.size(1), d_inner = y.size(2);
  auto gated = (y * torch::silu(z)).view({B, T, groups, d_inner / groups});
  return rms_norm(gated, weight.view({groups, d_inner / groups}), eps).reshape({B, T, d_inner});
}

void check_mamba_dt_and_norm(const std::string& family, double dt_min, double dt_max, double norm_eps) {
  if (!(norm_eps > 0)) throw Error(family + ": mamba_norm_eps must be > 0, got " + std::to_string(norm_eps));
  if (!(dt_min > 0 && dt_max >= dt_min))
    throw Error(family + ": need 0 < mamba_dt_min <= mamba_dt_max, got " + std::to_string(dt_min) + ", " +
                std::to_string(dt_max));
}

struct Mamba2Args {
  int64_t chunk_size = 64;
  std::string form = "chunk";  // "chunk" | "recurrent"
  double mamba_expand = 2.0;   // d_inner = expand · d_model
  int64_t mamba_head_dim = 64;
  int64_t mamba_d_state = 128;
  int64_t mamba_ngroups = 1;
  int64_t conv_size = 4;
  double mamba_a_min = 1.0, mamba_a_max = 16.0;  // A ~ U(a_min, a_max) (docs/models.md#shared-building-blocks)
  double mamba_dt_min = 1e-3, mamba_dt_max = 1e-1, mamba_dt_floor = 1e-4;
  bool mamba_d_skip = true;  // y += D ⊙ x with D initialised to 1
  double mamba_norm_eps = 1e-6;  // eps of the gated group RMSNorm (fla's Mamba2: the config's norm_eps, 1e-5)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Mamba2Args, chunk_size, form, mamba_expand, mamba_head_dim,
                                                mamba_d_state, mamba_ngroups, conv_size, mamba_a_min,
                                                mamba_a_max, mamba_dt_min, mamba_dt_max, mamba_dt_floor,
                                                mamba_d_skip, mamba_norm_eps)

class Mamba2Mixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  Mamba2Mixer(const MixerContext& ctx, const Mamba2Args& args) : args_(args) {
    check_kernel_form("mamba2", args.form, args.chunk_size);
    if (args.conv_size < 1) throw Error("mamba2: conv_size must be >= 1, got " + std::to_string(args.conv_size));
    check_mamba_dt_and_norm("mamba2", args.mamba_dt_min, args.mamba_dt_max, args.mamba_norm_eps);
    if (!(args.mamba_a_min > 0 && args.mamba_a_max >= args.mamba_a_min))
      throw Error("mamba2: need 0 < mamba_a_min <= mamba_a_max, got " + std::to_string(args.mamba_a_min) +
                  ", " + std::to_string(args.mamba_a_max));
    const MambaHeads heads =
        mamba_heads("mamba2", ctx.d_model, args.mamba_expand, args.mamba_head_dim, args.mamba_ngroups, args.mamba_d_state);
    d_inner_ = heads.d_inner, P_ = heads.P, H_ = heads.H, G_ = heads.G, N_ = heads.N;
    if (d_inner_ % G_ != 0)
      throw Error("mamba2: d_inner must be a multiple of mamba_ngroups");
    const int64_t conv_channels = d_inner_ + 2 * G_ * N_;
    in_proj_ = register_module("in_proj", make_linear(ctx.d_model, d_inner_ + conv_channels + H_));
    conv_ = register_module("conv", ShortConv(conv_channels, args.conv_size, /*silu=*/false));
    const double bound = 1.0 / std::sqrt(static_cast<double>(args.conv_size));  // PyTorch Conv1d default
    conv_bias_ = register_parameter("conv_bias", torch::empty({conv_channels}).uniform_(-bound, bound));
    A_log_ = register_parameter("A_log", init_a_log(H_, args.mamba_a_min, args.mamba_a_max));
    dt_bias_ = register_parameter(
        "dt_bias", init_dt_bias(H_, args.mamba_dt_min, args.mamba_dt_max, args.mamba_dt_floor));
    if (args.mamba_d_skip) D_ = register_parameter("D", torch::ones({H_}));
    norm_weight_ = register_parameter("norm_weight", torch::ones({d_inner_}));
    out_proj_ = register_module("out_proj", make_linear(d_inner_, ctx.d_model));
  }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "dt_bias"}; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1);
    auto in = inputs(x, [&](const torch::Tensor& xBC) { return conv_(xBC, state, "conv_xBC"); });
    auto s0 = state_or_empty(state, "memory");
    RecurrentResult r;
    if (use_chunked_kernel(args_.form, state, T) && in.xs.is_cuda() && mamba2_fused_kernel_available(in.xs)) {
      // On a GPU: the gated-linear-attention fused chunk kernel with the scalar gate a = A·dt.
      r = mamba2_ssd_chunk_fused(in.xs, in.dt, in.A, in.Bm, in.Cm, s0, args_.chunk_size);
    } else if (use_chunked_kernel(args_.form, state, T)) {
      // The chunked kernel takes B, C per group (C Bᵀ once per group, heads batched per group).
      r = mamba2_ssd_chunk_grouped(in.xs, in.dt, in.A, in.Bm, in.Cm, s0, args_.chunk_size);
    } else {
      auto Bm = in.Bm, Cm = in.Cm;
      if (G_ != H_) {
        Bm = Bm.repeat_interleave(H_ / G_, 2);
        Cm = Cm.repeat_interleave(H_ / G_, 2);
      }
      r = mamba2_ssd_recurrent(in.xs, in.dt, in.A, Bm, Cm, s0);
    }
    if (state) state->tensors["memory"] = r.final_state.detach();
    return output(r.o, in);
  }

  // Decode: the conv caches and the recurrent state, fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  // Packed sequences: the fused chunk form with cu_seqlens (the CUDA kernel on a GPU, docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, mamba2_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto in = inputs(x, [&](const torch::Tensor& xBC) { return conv_->forward_packed(xBC, seqs); });
    auto r = mamba2_ssd_chunk_fused(in.xs, in.dt, in.A, in.Bm, in.Cm, {}, args_.chunk_size, seqs.cu_seqlens);
    return output(r.o, in);
  }

 private:
  // in_proj -> [z, xBC, dt]; SiLU(conv(xBC) + bias) -> x, B, C per head / group; dt = softplus(dt + dt_bias).
  struct SsdInputs {
    torch::Tensor z, xs, Bm, Cm, dt, A;
  };
  template <class Conv>
  SsdInputs inputs(const torch::Tensor& x, Conv&& conv) {
    const int64_t B = x.size(0), T = x.size(1);
    auto zxbcdt = in_proj_(x);
    SsdInputs in;
    in.z = zxbcdt.narrow(-1, 0, d_inner_);
    auto xBC = zxbcdt.narrow(-1, d_inner_, d_inner_ + 2 * G_ * N_);
    auto dt_raw = zxbcdt.narrow(-1, 2 * d_inner_ + 2 * G_ * N_, H_);
    xBC = torch::silu(conv(xBC) + conv_bias_.to(x.scalar_type()));
    in.xs = xBC.narrow(-1, 0, d_inner_).view({B, T, H_, P_});
    in.Bm = xBC.narrow(-1, d_inner_, G_ * N_).view({B, T, G_, N_});
    in.Cm = xBC.narrow(-1, d_inner_ + G_ * N_, G_ * N_).view({B, T, G_, N_});
    const auto ct = recurrence_dtype(x);
    in.dt = torch::softplus(dt_raw.to(ct) + dt_bias_.to(ct));  // [B, T, H]
    in.A = -torch::exp(A_log_.to(ct));
    return in;
  }
  // y + D ⊙ x, then gate and norm (docs/models.md#shared-building-blocks, Mamba2 variant) and out_proj.
  torch::Tensor output(const torch::Tensor& o, const SsdInputs& in) {
    const int64_t B = in.xs.size(0), T = in.xs.size(1);
    auto y = o;
    if (D_.defined()) y = y + in.xs * D_.to(y.scalar_type()).view({1, 1, H_, 1});
    return out_proj_(mamba_gated_norm(y.reshape({B, T, d_inner_}), in.z, norm_weight_, G_, args_.mamba_norm_eps));
  }

  Mamba2Args args_;
  int64_t d_inner_ = 0, P_ = 0, H_ = 0, G_ = 0, N_ = 0;
  torch::nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  ShortConv conv_{nullptr};
  torch::Tensor conv_bias_, A_log_, dt_bias_, D_, norm_weight_;
};

// fla's "mamba2" (fla/models/mamba2/modeling_mamba2.py, fla/layers/mamba2.py torch_forward): Mamba2Block is
// RMSNorm(norm_eps) -> Mamba2 -> residual with no MLP (mnemo's block_mlp false); the mixer is this one: in_proj
// -> [z, xBC, dt], depthwise conv1d with bias + SiLU over xBC, dt = softplus(dt + dt_bias) clamped to dt_limit,
// A = -exp(A_log), SSD, y + D x, RMSNormGated(norm_before_gate=False, group_size = d_inner / n_groups, eps
// norm_eps) = RMSNorm_group(y * SiLU(z)) * w, out_proj; parameters under backbone.layers.<i>.mixer. Refused: a bias
// on in_proj/out_proj, no conv bias, no gated norm, the norm before the gate, D per channel, a dt_limit other
// than (0, inf), an activation other than SiLU.
static FlaMixerNames mamba2_fla_names() {
  FlaMixerNames n;
  n.model_type = "mamba2";
  n.block_mlp = false;
  n.names = {"backbone.", "norm", "mixer", "norm_f"};
  n.defaults = {{"state_size", 128}, {"conv_kernel", 4},     {"expand", 2},          {"head_dim", 64},
                {"num_heads", 64},   {"n_groups", 1},        {"use_bias", false},    {"use_conv_bias", true},
                {"hidden_act", "silu"}, {"rmsnorm", true},   {"norm_before_gate", false}, {"D_has_hdim", false},
                {"dt_limit", {0.0, {{"__float__", "Infinity"}}}}, {"norm_eps", 1e-5}, {"num_hidden_layers", 48},
                {"residual_in_fp32", true}, {"chunk_size", 256}, {"conv_init", nullptr},
                {"A_init_range", {1, 16}}, {"dt_min", 0.001}, {"dt_max", 0.1}, {"dt_init_floor", 1e-4}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    if (c.flag("use_bias")) c.refuse("use_bias: mnemo's in_proj and out_proj have no bias");
    if (!c.flag("use_conv_bias")) c.refuse("use_conv_bias false: mnemo's conv over xBC has a bias");
    fla_check_mamba2_layer(c);
    fla_mamba_head_keys(c, keys);
    keys["conv_size"] = c.integer("conv_kernel");
    keys["mamba_norm_eps"] = c.number("norm_eps");
    return "mamba2";
  };
  n.mixer_keys = [](const json&, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    map[at.mnemo + "in_proj.weight"] = {{at.fla + "in_proj.weight"}};
    map[at.mnemo + "conv.weight"] = {{at.fla + "conv1d.weight"}};
    map[at.mnemo + "conv_bias"] = {{at.fla + "conv1d.bias"}};
    map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
    map[at.mnemo + "dt_bias"] = {{at.fla + "dt_bias"}};
    map[at.mnemo + "D"] = {{at.fla + "D"}};
    map[at.mnemo + "norm_weight"] = {{at.fla + "norm.weight"}};
    map[at.mnemo + "out_proj.weight"] = {{at.fla + "out_proj.weight"}};
  };
  return n;
}

void register_mamba2_family(Registry& r) {
  r.add_mixer(make_mixer_family<Mamba2Args, Mamba2Mixer>(
      "mamba2", "Mamba2 SSD: scalar per-head decay exp(A dt), Conv4 over xBC, gated group RMSNorm (docs/models.md#mamba2)",
      {chunked_recurrence_flops, {"linear recurrent", "purple"}, 8e-3, {mamba2_fla_names()},
       {{"mamba_a_min", "the decay rate A ~ U(mamba_a_min, mamba_a_max) at initialisation, A_log = log A"},
        {"mamba_a_max", "upper end of A's initial range (see mamba_a_min)"},
        {"mamba_d_skip", "the skip y += D x, D initialised to 1"}}}));
}

}  // namespace mnemo
