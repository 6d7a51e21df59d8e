// `mamba` mixer: Mamba (v1) (Gu & Dao, arXiv 2312.00752 §3.4, Figure 3; docs/models.md#mamba), with mamba_ssm's and
// flash-linear-attention's layer for the parameterisation and the names, so that fla's checkpoints import:
//   [x, z] = in_proj(u)                        (d_inner = expand · d_model each, no bias)
//   x = SiLU(conv(x) + conv_bias)              (depthwise causal conv of conv_size)
//   [δ, B, C] = x_proj(x)                      (dt_rank + 2N, no bias), Δ = softplus(dt_proj(δ)) (with bias)
//   A = −exp(A_log) [d_inner, N]              (A_log = log n at initialisation: S4D-real)
//   y = selective_scan(x, Δ, A, B, C) + D ⊙ x  (runtime/mamba/selective_scan.h: a CUDA kernel on a GPU, fused on a CPU)
//   out = out_proj(y ⊙ SiLU(z))
// Decode state: "memory" h [B, d_inner, N] (fp32; fp64 for fp64 modules) and the conv cache "conv_x".
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/layers.h"
#include "runtime/mamba/selective_scan.h"
#include "runtime/mixing_flops.h"
#include "runtime/no_weight_decay.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct MambaArgs {
  int64_t chunk_size = 64;     // steps between the fused scans' checkpoints / per doubling scan (speed and memory only)
  std::string form = "chunk";  // "chunk" | "recurrent"
  double mamba_expand = 2.0;   // d_inner = expand · d_model
  int64_t mamba_d_state = 16;  // state entries N per channel
  int64_t mamba_dt_rank = 0;   // rank of Δ's projection; 0 = ceil(d_model / 16)
  int64_t conv_size = 4;
  double mamba_dt_min = 1e-3, mamba_dt_max = 1e-1, mamba_dt_floor = 1e-4;
  double mamba_dt_scale = 1.0;  // dt_proj.weight ~ U(±dt_scale / sqrt(dt_rank))
  bool mamba_d_skip = true;     // y += D ⊙ x with D initialised to 1
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MambaArgs, chunk_size, form, mamba_expand, mamba_d_state, mamba_dt_rank,
                                                conv_size, mamba_dt_min, mamba_dt_max, mamba_dt_floor, mamba_dt_scale,
                                                mamba_d_skip)

class MambaMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  MambaMixer(const MixerContext& ctx, const MambaArgs& a) : args_(a) {
    check_kernel_form("mamba", a.form, a.chunk_size);
    if (a.conv_size < 1) throw Error("mamba: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.mamba_d_state < 1) throw Error("mamba: mamba_d_state must be >= 1, got " + std::to_string(a.mamba_d_state));
    if (a.mamba_dt_rank < 0) throw Error("mamba: mamba_dt_rank must be >= 0 (0: ceil(d_model / 16)), got " +
                                         std::to_string(a.mamba_dt_rank));
    if (!(a.mamba_dt_min > 0 && a.mamba_dt_max >= a.mamba_dt_min))
      throw Error("mamba: need 0 < mamba_dt_min <= mamba_dt_max, got " + std::to_string(a.mamba_dt_min) + ", " +
                  std::to_string(a.mamba_dt_max));
    if (!(a.mamba_dt_scale > 0)) throw Error("mamba: mamba_dt_scale must be > 0, got " + std::to_string(a.mamba_dt_scale));
    const int64_t d = ctx.d_model;
    d_inner_ = expanded_head_dim("mamba", "mamba_expand", d, a.mamba_expand, 1);
    N_ = a.mamba_d_state;
    R_ = a.mamba_dt_rank > 0 ? a.mamba_dt_rank : (d + 15) / 16;
    in_proj_ = register_module("in_proj", make_linear(d, 2 * d_inner_));
    conv_ = register_module("conv", ShortConv(d_inner_, a.conv_size, /*silu=*/false));
    const double conv_bound = 1.0 / std::sqrt(static_cast<double>(a.conv_size));  // PyTorch Conv1d default
    conv_bias_ = register_parameter("conv_bias", torch::empty({d_inner_}).uniform_(-conv_bound, conv_bound));
    x_proj_ = register_module("x_proj", make_linear(d_inner_, R_ + 2 * N_));
    dt_proj_ = register_module("dt_proj", make_linear(R_, d_inner_, /*bias=*/true));
    {
      torch::NoGradGuard no_grad;
      const double bound = a.mamba_dt_scale / std::sqrt(static_cast<double>(R_));
      dt_proj_->weight.uniform_(-bound, bound);
      dt_proj_->bias.copy_(init_dt_bias(d_inner_, a.mamba_dt_min, a.mamba_dt_max, a.mamba_dt_floor));
    }
    // S4D-real: A[:, n] = −(n + 1) for every channel.
    A_log_ = register_parameter(
        "A_log", torch::arange(1, N_ + 1, torch::kFloat32).log().unsqueeze(0).expand({d_inner_, N_}).contiguous());
    if (a.mamba_d_skip) D_ = register_parameter("D", torch::ones({d_inner_}));
    out_proj_ = register_module("out_proj", make_linear(d_inner_, d));
  }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "D"}; }

  torch::Tensor forward(const torch::Tensor& u, LayerState* state) override {
    const int64_t T = u.size(1);
    auto in = inputs(u, [&](const torch::Tensor& x) { return conv_(x, state, "conv_x"); });
    auto s0 = state_or_empty(state, "memory");
    // On a GPU the selective-scan kernel; on a CPU the fused scan (both mamba_ssm's way: sequential in time, parallel
    // over channels); elsewhere the doubling scan, all positions of a chunk at once.
    RecurrentResult r;
    if (!use_chunked_kernel(args_.form, state, T))
      r = selective_scan_recurrent(in.x, in.dt, in.A, in.Bm, in.Cm, s0);
    else if (selective_scan_kernel_eligible(in.x))
      r = selective_scan_kernel(in.x, in.dt, in.A, in.Bm, in.Cm, s0, args_.chunk_size);
    else if (in.x.device().is_cpu())
      r = selective_scan_fused(in.x, in.dt, in.A, in.Bm, in.Cm, s0, args_.chunk_size);
    else
      r = selective_scan_chunk(in.x, in.dt, in.A, in.Bm, in.Cm, s0, args_.chunk_size);
    if (state) state->tensors["memory"] = r.final_state.detach();
    return output(r.o, in);
  }

  // Decode: the conv cache and the recurrent state, fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  // Packed sequences: the selective-scan kernel with cu_seqlens (docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, selective_scan_kernel_on_device(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& u, const PackedSequences& seqs) override {
    auto in = inputs(u, [&](const torch::Tensor& x) { return conv_->forward_packed(x, seqs); });
    auto y = selective_scan_kernel_packed(in.x, in.dt, in.A, in.Bm, in.Cm, seqs.cu_seqlens, args_.chunk_size);
    return output(y, in);
  }

 private:
  // in_proj -> [x, z]; x = SiLU(conv(x) + b_conv); [δ, B, C] = x_proj(x); Δ = softplus(dt_proj(δ)); A = −exp(A_log).
  struct ScanInputs {
    torch::Tensor x, z, dt, Bm, Cm, A;
  };
  template <class Conv>
  ScanInputs inputs(const torch::Tensor& u, Conv&& conv) {
    ScanInputs in;
    auto xz = in_proj_(u);
    in.z = xz.narrow(-1, d_inner_, d_inner_);
    auto x = xz.narrow(-1, 0, d_inner_);
    in.x = torch::silu(conv(x) + conv_bias_.to(x.scalar_type()));
    auto dbc = x_proj_(in.x);
    in.dt = torch::softplus(dt_proj_(dbc.narrow(-1, 0, R_)).to(recurrence_dtype(u)));  // Δ [B, T, d_inner]
    in.Bm = dbc.narrow(-1, R_, N_), in.Cm = dbc.narrow(-1, R_ + N_, N_);
    in.A = -torch::exp(A_log_.to(in.dt.scalar_type()));
    return in;
  }
  // y + D ⊙ x, gated by SiLU(z), projected out.
  torch::Tensor output(torch::Tensor y, const ScanInputs& in) {
    if (D_.defined()) y = y + in.x * D_.to(y.scalar_type());
    return out_proj_(y * torch::silu(in.z));
  }

  MambaArgs args_;
  int64_t d_inner_ = 0, N_ = 0, R_ = 0;
  torch::nn::Linear in_proj_{nullptr}, x_proj_{nullptr}, dt_proj_{nullptr}, out_proj_{nullptr};
  ShortConv conv_{nullptr};
  torch::Tensor conv_bias_, A_log_, D_;
};

// fla's "mamba" (fla/models/mamba/modeling_mamba.py, fla/layers/mamba.py slow_forward, the same function as
// mamba_ssm's Mamba): MambaBlock is RMSNorm(norm_eps) -> Mamba -> residual with no MLP (mnemo's block_mlp false);
// the mixer is this one, its parameters under backbone.layers.<i>.mixer. (in_proj, conv1d with bias, x_proj,
// dt_proj, A_log, D, out_proj). Refused: a bias on in_proj / out_proj, no conv bias, an activation other than SiLU,
// an intermediate_size other than expand × hidden_size.
static FlaMixerNames mamba_fla_names() {
  FlaMixerNames n;
  n.model_type = "mamba";
  n.block_mlp = false;
  n.names = {"backbone.", "norm", "mixer", "norm_f"};
  n.defaults = {{"state_size", 16},       {"expand", 2},           {"conv_kernel", 4},   {"use_bias", false},
                {"use_conv_bias", true},  {"hidden_act", "silu"},  {"dt_rank", "auto"},  {"intermediate_size", nullptr},
                {"norm_eps", 1e-5},       {"num_hidden_layers", 48}, {"residual_in_fp32", false},
                {"dt_scale", 1.0},        {"dt_min", 0.001},       {"dt_max", 0.1},      {"dt_init_scheme", "random"},
                {"dt_init_floor", 1e-4},  {"num_heads", 1}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    if (c.flag("use_bias")) c.refuse("use_bias: mnemo's in_proj and out_proj have no bias");
    if (!c.flag("use_conv_bias")) c.refuse("use_conv_bias false: mnemo's conv has a bias");
    if (c.config.at("hidden_act") != "silu" && c.config.at("hidden_act") != "swish")
      c.refuse("hidden_act " + json_excerpt(c.config.at("hidden_act")) + ": mnemo's conv activation and gate are SiLU");
    const int64_t d = keys.at("d_model");
    const double expand = c.number("expand");
    const int64_t inner = c.exact_dim("expand", d, 1);
    if (!c.is_null("intermediate_size") && c.integer("intermediate_size") != inner)
      c.refuse("intermediate_size " + std::to_string(c.integer("intermediate_size")) + " is not expand x hidden_size = " +
               std::to_string(inner));
    const json& rank = c.config.at("dt_rank");
    if (rank.is_string() && rank != "auto") c.refuse("dt_rank " + json_excerpt(rank) + " is neither \"auto\" nor an integer");
    keys["block_mlp"] = false;
    keys["n_heads"] = 1;  // the layer has no heads; the skeleton's must divide d_model
    keys["mamba_expand"] = expand;
    keys["mamba_d_state"] = c.integer("state_size");
    keys["mamba_dt_rank"] = rank.is_string() ? (d + 15) / 16 : c.integer("dt_rank");
    keys["conv_size"] = c.integer("conv_kernel");
    keys["mamba_d_skip"] = true;  // fla's layer always has D
    return "mamba";
  };
  n.from_mnemo = [](json& view, json& c) {  // the fields to_mnemo reads, back from the mixer's arguments
    const int64_t d = view.at("d_model"), rank = view.value("mamba_dt_rank", int64_t{0});
    view["mamba_dt_rank"] = rank > 0 ? rank : (d + 15) / 16;
    c["dt_rank"] = view["mamba_dt_rank"];
    // fla's config derives it in __init__, but a null in config.json would override that.
    c["intermediate_size"] = std::llround(view.value("mamba_expand", 2.0) * static_cast<double>(d));
    view["n_heads"] = 1;   // the layer has no heads: any n_heads is the same model
    c.erase("num_heads");  // not a field of fla's MambaConfig
  };
  n.mixer_keys = [](const json& keys, const json&, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"in_proj", "x_proj", "dt_proj", "out_proj"})
      map[at.mnemo + p + ".weight"] = {{at.fla + p + ".weight"}};
    map[at.mnemo + "dt_proj.bias"] = {{at.fla + "dt_proj.bias"}};
    map[at.mnemo + "conv.weight"] = {{at.fla + "conv1d.weight"}};
    map[at.mnemo + "conv_bias"] = {{at.fla + "conv1d.bias"}};
    map[at.mnemo + "A_log"] = {{at.fla + "A_log"}};
    if (keys.value("mamba_d_skip", true)) map[at.mnemo + "D"] = {{at.fla + "D"}};
  };
  return n;
}

void register_mamba_family(Registry& r) {
  r.add_mixer(make_mixer_family<MambaArgs, MambaMixer>(
      "mamba",
      "Mamba (v1): selective SSM, a diagonal state of mamba_d_state entries per channel, Conv4, SiLU gate "
      "(docs/models.md#mamba)",
      {chunked_recurrence_flops,
       {"linear recurrent", "grey"},
       2e-3,
       {mamba_fla_names()},
       {{"mamba_d_state", "state entries N per channel (Mamba v1: a diagonal N-state per channel of d_inner)"},
        {"mamba_dt_rank", "rank of the projection that gives the step size; 0 = ceil(d_model / 16)"},
        {"mamba_dt_scale", "dt_proj.weight ~ U(-s, s) with s = mamba_dt_scale / sqrt(dt_rank) at initialisation"},
        {"mamba_d_skip", "the skip y += D x, D initialised to 1"},
        {"chunk_size", "steps per chunk: between the saved states of the fused CPU scan and of the CUDA kernel, and "
                       "of the doubling scan (speed and memory only)"}}}));
}

}  // namespace mnemo
