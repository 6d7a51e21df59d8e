// `mamba3` mixer (docs/models.md#mamba-3; arXiv 2603.15569 §3, parameterised as flash-linear-attention's Mamba3
// layer, SISO): in_proj -> [z, x, B, C, dt_raw, A_raw, trap, angles] with no short conv;
//   Δ = softplus(dt_raw + dt_bias),  A = min(−softplus(A_raw), −A_floor),  a = A Δ,  λ = σ(trap)
//   B, C: RMSNorm over the state (weights B_norm, C_norm) per group, broadcast to the heads of the group, + a per-head
//         bias (B_bias, C_bias, initialised to 1)
//   θ = π tanh(angles), one rate per rotated pair shared by the heads (rope_fraction of the state is rotated)
//   y = scan(q = C, k = B, v = x) (runtime/mamba3/mamba3.h) + D ⊙ x,  out = out_proj(y ⊙ SiLU(z))
//   (with mamba_outproj_norm: out = out_proj(RMSNorm_head(y) ⊙ w ⊙ SiLU(z)))
// Heads = d_inner / head_dim (the model's n_heads is not used). Decode state, O(1) in T: "memory" h [B, H, P, N],
// "k_prev" [B, H, N], "v_prev" [B, H, P], "angle" [B, H, R] (fp32; fp64 for fp64 modules).
// MIMO (mamba_mimo_rank = R >= 1; fla's is_mimo, mimo_rank): B and C are R per token ([B, T, R, G, N] from in_proj,
// biases [H, R, N]); the values of rank r are x ⊙ mimo_x[:, r], the gate of rank r SiLU(z ⊙ mimo_z[:, r]); the scan is
// mamba3_mimo_* (halves rotation) and out = out_proj(Σ_r ((y_r + D x_r) ⊙ gate_r) ⊙ mimo_o[:, r]) (with
// mamba_outproj_norm the per-head RMSNorm of y_r before its gate). Decode state: k_prev [B, R, H, N],
// v_prev [B, R, H, P].
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"
#include "runtime/mamba2/mamba2.h"
#include "runtime/mamba3/fla_names.h"
#include "runtime/mamba3/mamba3.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/gla/gla.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"

namespace mnemo {

struct Mamba3Args {
  int64_t chunk_size = 64;
  std::string form = "chunk";  // "chunk" | "recurrent"
  double mamba_expand = 2.0;   // d_inner = expand · d_model
  int64_t mamba_head_dim = 64;
  int64_t mamba_d_state = 128;
  int64_t mamba_ngroups = 1;
  double mamba_rope_fraction = 0.5;  // share of the state's channels that are rotated: 0.5 or 1.0
  double mamba_a_floor = 1e-4;       // A <= −a_floor
  double mamba_dt_min = 1e-3, mamba_dt_max = 1e-1, mamba_dt_floor = 1e-4;
  bool mamba_outproj_norm = false;  // per-head RMSNorm before the gate (fla's is_outproj_norm)
  double mamba_norm_eps = 1e-5;     // eps of the B/C norms and the output norm (fla: the config's norm_eps)
  int64_t mamba_mimo_rank = 0;      // 0: SISO; R >= 1: MIMO of rank R (fla's is_mimo with mimo_rank R)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Mamba3Args, chunk_size, form, mamba_expand, mamba_head_dim,
                                                mamba_d_state, mamba_ngroups, mamba_rope_fraction, mamba_a_floor,
                                                mamba_dt_min, mamba_dt_max, mamba_dt_floor, mamba_outproj_norm,
                                                mamba_norm_eps, mamba_mimo_rank)

// Rotated pairs: ⌊d_state · rope_fraction⌋ rounded down to even, halved (fla's num_rope_angles).
static int64_t mamba3_rope_angles(int64_t d_state, double rope_fraction) {
  int64_t rotated = static_cast<int64_t>(static_cast<double>(d_state) * rope_fraction);
  if (rotated % 2 != 0) --rotated;
  return rotated / 2;
}

class Mamba3Mixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  Mamba3Mixer(const MixerContext& ctx, const Mamba3Args& args) : args_(args) {
    check_kernel_form("mamba3", args.form, args.chunk_size);
    if (args.mamba_rope_fraction != 0.5 && args.mamba_rope_fraction != 1.0)
      throw Error("mamba3: mamba_rope_fraction must be 0.5 or 1.0, got " + std::to_string(args.mamba_rope_fraction));
    if (!(args.mamba_a_floor > 0)) throw Error("mamba3: mamba_a_floor must be > 0, got " + std::to_string(args.mamba_a_floor));
    check_mamba_dt_and_norm("mamba3", args.mamba_dt_min, args.mamba_dt_max, args.mamba_norm_eps);
    const MambaHeads heads =
        mamba_heads("mamba3", ctx.d_model, args.mamba_expand, args.mamba_head_dim, args.mamba_ngroups, args.mamba_d_state);
    d_inner_ = heads.d_inner, P_ = heads.P, H_ = heads.H, G_ = heads.G, N_ = heads.N;
    R_ = mamba3_rope_angles(N_, args.mamba_rope_fraction);
    if (R_ < 1)
      throw Error("mamba3: mamba_d_state " + std::to_string(N_) + " times mamba_rope_fraction gives no rotated pair");
    if (args.mamba_mimo_rank < 0)
      throw Error("mamba3: mamba_mimo_rank must be 0 (SISO) or a rank >= 1, got " + std::to_string(args.mamba_mimo_rank));
    mimo_ = args.mamba_mimo_rank > 0;
    ranks_ = mimo_ ? args.mamba_mimo_rank : 1;
    in_proj_ = register_module("in_proj", make_linear(ctx.d_model, 2 * d_inner_ + 2 * ranks_ * G_ * N_ + 3 * H_ + R_));
    dt_bias_ = register_parameter("dt_bias",
                                  init_dt_bias(H_, args.mamba_dt_min, args.mamba_dt_max, args.mamba_dt_floor));
    B_bias_ = register_parameter("B_bias", torch::ones({H_, ranks_, N_}));  // [H, MIMO rank, N] as fla
    C_bias_ = register_parameter("C_bias", torch::ones({H_, ranks_, N_}));
    if (mimo_) {  // fla's initialisation: the ranks average the values and the outputs
      mimo_x_ = register_parameter("mimo_x", torch::ones({H_, ranks_, P_}) / static_cast<double>(ranks_));
      mimo_z_ = register_parameter("mimo_z", torch::ones({H_, ranks_, P_}));
      mimo_o_ = register_parameter("mimo_o", torch::ones({H_, ranks_, P_}) / static_cast<double>(ranks_));
    }
    B_norm_ = register_parameter("B_norm_weight", torch::ones({N_}));
    C_norm_ = register_parameter("C_norm_weight", torch::ones({N_}));
    D_ = register_parameter("D", torch::ones({H_}));
    if (args.mamba_outproj_norm) norm_weight_ = register_parameter("norm_weight", torch::ones({d_inner_}));
    out_proj_ = register_module("out_proj", make_linear(d_inner_, ctx.d_model));
  }

  std::vector<std::string> no_weight_decay() const override { return {"dt_bias", "D"}; }

  // Decode: the recurrent state, the previous token's k and v and the cumulative rotation angle: fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    auto [in, xs, z] = inputs(x);
    const int64_t B = x.size(0), T = x.size(1);
    const auto ct = recurrence_dtype(x);
    if (!mimo_) {
      in.q = in.q.squeeze(2);
      in.k = in.k.squeeze(2);
      return siso_output(scan(in, state, T).o, xs, z, x);
    }
    // MIMO: per-rank values x ⊙ mimo_x_r, outputs ((y_r + D x_r) ⊙ SiLU(z ⊙ mimo_z_r)) ⊙ mimo_o_r summed over r.
    auto per_rank = [&](const torch::Tensor& t, const torch::Tensor& p) {  // [B, T, H, P] ⊙ [H, R, P] -> [B, T, R, H, P]
      return t.unsqueeze(2) * p.to(t.scalar_type()).permute({1, 0, 2}).unsqueeze(0).unsqueeze(0);
    };
    auto values = per_rank(xs.to(ct), mimo_x_);
    in.v = values;
    auto r = scan(in, state, T);
    auto y = r.o.to(ct) + values * D_.to(ct).view({1, 1, 1, H_, 1});  // [B, T, R, H, P]
    if (norm_weight_.defined()) y = rms_norm(y, norm_weight_.to(ct).view({H_, P_}), args_.mamba_norm_eps);
    auto zr = per_rank(z.view({B, T, H_, P_}).to(ct), mimo_z_);
    y = (y * torch::silu(zr) * mimo_o_.to(ct).permute({1, 0, 2}).unsqueeze(0).unsqueeze(0)).sum(2);
    return out_proj_(y.reshape({B, T, d_inner_}).to(x.scalar_type()));
  }

  // Packed sequences (SISO): GLA's fused kernels with cu_seqlens, the angles and the trapezoid restarting at each
  // document (mamba3_chunk_packed; docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return !mimo_ && args_.form == "chunk" && packed_forms_enabled(x, gla_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    auto [in, xs, z] = inputs(x);
    in.q = in.q.squeeze(2);
    in.k = in.k.squeeze(2);
    return siso_output(mamba3_chunk_packed(in, seqs.positions, seqs.cu_seqlens, args_.chunk_size), xs, z, x);
  }

 private:
  // The scan's inputs from in_proj: q = C and k = B (RMS-normalised, biased, [B, T, R, H, N]), v = x [B, T, H, P],
  // a = A·Δ, Δ, λ, θ; and z, x for the output.
  struct LayerInputs {
    Mamba3Inputs in;
    torch::Tensor xs, z;
  };
  LayerInputs inputs(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), K = ranks_;
    auto proj = in_proj_(x);
    int64_t at = 0;
    auto take = [&](int64_t n) {
      auto t = proj.narrow(-1, at, n);
      at += n;
      return t;
    };
    auto z = take(d_inner_), xs = take(d_inner_).view({B, T, H_, P_});
    auto Bm = take(K * G_ * N_).view({B, T, K, G_, N_}), Cm = take(K * G_ * N_).view({B, T, K, G_, N_});
    auto dt_raw = take(H_), A_raw = take(H_), trap = take(H_), angles = take(R_);
    const auto ct = recurrence_dtype(x);
    auto dt = torch::softplus(dt_raw.to(ct) + dt_bias_.to(ct));                        // Δ [B, T, H]
    auto A = (-torch::softplus(A_raw.to(ct))).clamp_max(-args_.mamba_a_floor);          // [B, T, H]
    auto theta = (torch::tanh(angles.to(ct)) * M_PI).unsqueeze(2).expand({B, T, H_, R_});
    // B, C [B, T, R, G, N]: RMSNorm over the state in fp32 (fla's RMSNormGated upcasts), groups -> heads, + the
    // per-(head, rank) bias [H, R, N].
    auto to_heads = [&](const torch::Tensor& m, const torch::Tensor& w, const torch::Tensor& bias) {
      auto n = rms_norm(m.to(ct), w.to(ct), args_.mamba_norm_eps);
      if (G_ != H_) n = n.repeat_interleave(H_ / G_, 3);
      return n + bias.to(ct).permute({1, 0, 2}).unsqueeze(0).unsqueeze(0);
    };
    Mamba3Inputs in{to_heads(Cm, C_norm_, C_bias_), to_heads(Bm, B_norm_, B_bias_), xs, A * dt, dt,
                    torch::sigmoid(trap.to(ct)), theta};
    return {in, xs, z};
  }

  // SISO: out_proj(((y + D x) [RMSNorm]) ⊙ SiLU(z)).
  torch::Tensor siso_output(const torch::Tensor& o, const torch::Tensor& xs, const torch::Tensor& z,
                            const torch::Tensor& x) {
    auto y = o + xs * D_.to(o.scalar_type()).view({1, 1, H_, 1});
    if (norm_weight_.defined()) y = rms_norm(y, norm_weight_.view({H_, P_}), args_.mamba_norm_eps);
    y = y.reshape({x.size(0), x.size(1), d_inner_}) * torch::silu(z);
    return out_proj_(y.to(x.scalar_type()));
  }

  // The scan (SISO or MIMO, chunked or token by token) from the carried state (decode) or zeros; the new state
  // stored back. On a GPU the SISO chunk form runs GLA's fused kernels (runtime/gla/chunk_kernel.cuh).
  Mamba3Result scan(const Mamba3Inputs& in, LayerState* state, int64_t T) {
    Mamba3State s0{state_or_empty(state, "memory"), state_or_empty(state, "k_prev"), state_or_empty(state, "v_prev"),
                   state_or_empty(state, "angle")};
    const bool chunked = use_chunked_kernel(args_.form, state, T);
    auto r = mimo_ ? (chunked ? mamba3_mimo_chunk(in, s0, args_.chunk_size) : mamba3_mimo_recurrent(in, s0))
                   : (chunked ? mamba3_chunk(in, s0, args_.chunk_size, gla_chunk_route(in.q)) : mamba3_recurrent(in, s0));
    if (state) {
      state->tensors["memory"] = r.state.h.detach();
      state->tensors["k_prev"] = r.state.k_prev.detach();
      state->tensors["v_prev"] = r.state.v_prev.detach();
      state->tensors["angle"] = r.state.angle.detach();
    }
    return r;
  }
  Mamba3Args args_;
  bool mimo_ = false;
  int64_t ranks_ = 1;
  int64_t d_inner_ = 0, P_ = 0, H_ = 0, G_ = 0, N_ = 0, R_ = 0;
  torch::nn::Linear in_proj_{nullptr}, out_proj_{nullptr};
  torch::Tensor dt_bias_, B_bias_, C_bias_, B_norm_, C_norm_, D_, norm_weight_, mimo_x_, mimo_z_, mimo_o_;
};

// Per token and layer: the scan as a chunked scalar-decay recurrence (chunked_recurrence_flops). MIMO of rank R: every
// token writes and reads the state R times (state term x R) and the causal block of a chunk holds C·R keys for R
// queries per token (chunk term x R²).
static double mamba3_mixing_flops(const MixingFlopsQuery& q) {
  const double rank = std::max<double>(1.0, number_arg(q.args, "mamba_mimo_rank", 0));
  const double chunk = number_arg(q.args, "chunk_size", 64);
  const double state = 4 * q.d_model * q.head_dim * rank;
  return q.decode ? state : 2 * chunk * q.d_model * rank * rank + state;
}

void register_mamba3_family(Registry& r) {
  r.add_mixer(make_mixer_family<Mamba3Args, Mamba3Mixer>(
      "mamba3",
      "Mamba-3: exponential-trapezoidal SSM with data-dependent rotary B/C, no conv; SISO, or MIMO with "
      "mamba_mimo_rank (docs/models.md#mamba-3)",
      {mamba3_mixing_flops,
       {"recent linear memories", "brown", {{"mamba_mimo_rank", "MIMO rank"}}},
       2e-3,
       {mamba3_fla_names()},
       {{"mamba_rope_fraction", "share of the state's channels the data-dependent rotation turns: 0.5 or 1.0"},
        {"mamba_a_floor", "the decay rate is clamped to A <= -mamba_a_floor"},
        {"mamba_outproj_norm", "per-head RMSNorm before the output gate (fla's is_outproj_norm)"},
        {"mamba_mimo_rank", "0: the SISO layer; R >= 1: MIMO of rank R (R key/value/query ranks per token, fla's "
                            "is_mimo with mimo_rank R)"}}}));
}

}  // namespace mnemo
