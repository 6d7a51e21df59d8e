// Lattice-DEC / Lattice-DOT mixers (docs/models.md#lattice):
//   [q | k] = x W_qk (one fused projection, H·m each) -> two depthwise Conv4 + SiLU (q and k)
//   v = x W_v (no conv, no activation); no l2norm on q or k (k carries the writing intensity)
//   γ = σ(x W_γ + b_γ) (b_γ = 0), μ = σ(x w_μ + b_μ) (b_μ = +5; forget_gate = false: μ ≡ 1), per head
//   y = Lattice memory (§9.2 exact at C = 1, approximation (17) for C > 1, per-token β, chunk-end
//       renormalisation), from a learnable initial state with orthonormal rows (QR of a Gaussian)
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ GELU((x W_g)_h) )                          (docs/models.md#shared-building-blocks)
// Decode state: "S" (running), "S0" (chunk-start anchor), "pos" (position in the chunk), conv caches.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/lattice/lattice.h"
#include "runtime/layers.h"
#include "runtime/no_weight_decay.h"
#include "runtime/registry.h"
#include "runtime/kernels/gelu.h"

namespace mnemo {

struct LatticeArgs {
  int64_t num_heads = 0;   // 0: the model's n_heads
  int64_t head_dim = 0;    // d (value / slot width); 0: d_model / heads (the paper: 64)
  int64_t slots = 0;       // m slots per head; 0: head_dim (the paper: m = d_head = 64)
  int64_t chunk_size = 4;  // C: model hyper-parameter (docs/models.md#lattice: C = 4 for the LM runs; 1 = exact recurrence)
  int64_t conv_size = 4;
  bool forget_gate = true;  // μ_t gate (docs/models.md#lattice "+ forget-gate (11)")
  double mu_bias = 5.0;
  double gamma_bias = 0.0;
  std::string form = "chunk";  // "chunk" | "recurrent" (token loop of the same model; reference/debug)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LatticeArgs, num_heads, head_dim, slots, chunk_size, conv_size,
                                                forget_gate, mu_bias, gamma_bias, form)

// S_init is a learned initial memory state: no weight decay (docs/models.md#conventions).
class LatticeMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  std::vector<std::string> no_weight_decay() const override { return {"S_init"}; }
  LatticeMixer(const MixerContext& ctx, const LatticeArgs& a, bool dec) : a_(a), dec_(dec) {
    const std::string fam = dec ? "lattice_dec" : "lattice_dot";
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (H_ < 1) throw Error(fam + ": number of heads must be >= 1");
    if (a.head_dim > 0) {
      d_ = a.head_dim;
    } else {
      if (ctx.d_model % H_ != 0) throw Error(fam + ": d_model is not divisible by the number of heads (set head_dim)");
      d_ = ctx.d_model / H_;
    }
    m_ = a.slots > 0 ? a.slots : d_;
    if (a.chunk_size < 1) throw Error(fam + ": chunk_size must be >= 1, got " + std::to_string(a.chunk_size));
    if (a.conv_size < 1) throw Error(fam + ": conv_size must be >= 1, got " + std::to_string(a.conv_size));
    check_form(fam, a.form);
    qk_proj_ = register_module("qk_proj", make_linear(ctx.d_model, 2 * H_ * m_));
    conv_q_ = register_module("conv_q", ShortConv(H_ * m_, a.conv_size, true));
    conv_k_ = register_module("conv_k", ShortConv(H_ * m_, a.conv_size, true));
    v_proj_ = register_module("v_proj", make_linear(ctx.d_model, H_ * d_));
    gamma_proj_ = register_module("gamma_proj", make_linear(ctx.d_model, H_, true));
    if (a.forget_gate) mu_proj_ = register_module("mu_proj", make_linear(ctx.d_model, H_, true));
    gate_proj_ = register_module("gate_proj", make_linear(ctx.d_model, H_ * d_));
    out_proj_ = register_module("out_proj", make_linear(H_ * d_, ctx.d_model));
    norm_w_ = register_parameter("norm_weight", torch::ones({d_}));
    torch::NoGradGuard ng;
    gamma_proj_->bias.fill_(a.gamma_bias);
    if (a.forget_gate) mu_proj_->bias.fill_(a.mu_bias);
    // Learnable initial slots (docs/models.md#lattice): orthonormal rows (QR of a Gaussian) when m <= d, else unit-norm rows.
    torch::Tensor s0;
    if (m_ <= d_) {
      auto qr = torch::linalg_qr(torch::randn({H_, d_, m_}));
      s0 = std::get<0>(qr).transpose(1, 2).contiguous();  // [H, m, d], orthonormal rows
    } else {
      s0 = torch::randn({H_, m_, d_});
      s0 = s0 / s0.norm(2, {-1}, true);
    }
    S_init_ = register_parameter("S_init", s0);
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto qk = qk_proj_(x);
    auto q = conv_q_(qk.narrow(-1, 0, H_ * m_), state, "conv_q").view({B, T, H_, m_});
    auto k = conv_k_(qk.narrow(-1, H_ * m_, H_ * m_), state, "conv_k").view({B, T, H_, m_});
    auto v = v_proj_(x).view({B, T, H_, d_});
    auto gamma = torch::sigmoid(gamma_proj_(x));
    auto mu = a_.forget_gate ? torch::sigmoid(mu_proj_(x)) : torch::ones_like(gamma);

    LatticeState st;
    if (state && state->has("S")) {
      st.S = state->at("S");
      st.S0 = state->at("S0");
      st.pos = state->at("pos").item<int64_t>();
    } else {
      st.S = S_init_.unsqueeze(0).expand({B, H_, m_, d_});
      st.S0 = st.S;
    }
    auto r = a_.form == "recurrent" || (state && T == 1) ? lattice_recurrent(q, k, v, gamma, mu, st, a_.chunk_size, dec_)
                                                          : lattice_chunk(q, k, v, gamma, mu, st, a_.chunk_size, dec_);
    if (state) {
      state->tensors["S"] = r.state.S.detach();
      state->tensors["S0"] = r.state.S0.detach();
      state->tensors["pos"] = torch::full({1}, r.state.pos, torch::kLong);
    }
    auto y = r.y.to(x.scalar_type());  // [B, T, H, d]
    auto g = gate_proj_(x).view({B, T, H_, d_});
    auto o = rms_norm(y, norm_w_, 1e-6) * gelu_safe(g);  // Lattice output gate (docs/models.md#shared-building-blocks)
    return out_proj_(o.reshape({B, T, H_ * d_}));
  }

 private:
  LatticeArgs a_;
  bool dec_;
  int64_t H_ = 0, d_ = 0, m_ = 0;
  torch::nn::Linear qk_proj_{nullptr}, v_proj_{nullptr}, gamma_proj_{nullptr}, mu_proj_{nullptr}, gate_proj_{nullptr},
      out_proj_{nullptr};
  ShortConv conv_q_{nullptr}, conv_k_{nullptr};
  torch::Tensor norm_w_, S_init_;
};

namespace {
struct LatticeDec : LatticeMixer {
  LatticeDec(const MixerContext& c, const LatticeArgs& a) : LatticeMixer(c, a, true) {}
};
struct LatticeDot : LatticeMixer {
  LatticeDot(const MixerContext& c, const LatticeArgs& a) : LatticeMixer(c, a, false) {}
};
}  // namespace

// Both in the CPU quickstart (d_model-64 quickstart cell, 1 thread: lattice_dec 27 s, lattice_dot 19 s). The chunk
// C is a report variant: approximation (17) makes it part of the model ("lattice_dec (C 1)", the exact recurrence).
void register_lattice_families(Registry& r) {
  r.add_mixer(make_mixer_family<LatticeArgs, LatticeDec>(
      "lattice_dec", "Lattice-DEC: orthogonal slot memory, decoder loss, chunk approx. (17) (docs/models.md#lattice)",
      {chunked_recurrence_flops, {"MoM / Lattice", "orange", {{"chunk_size", "C"}}}},
      /*cpu_quickstart=*/true));
  r.add_mixer(make_mixer_family<LatticeArgs, LatticeDot>(
      "lattice_dot", "Lattice-DOT: orthogonal slot memory, dot-product loss, chunk approx. (17) (docs/models.md#lattice)",
      {chunked_recurrence_flops, {"MoM / Lattice", "purple", {{"chunk_size", "C"}}}},
      /*cpu_quickstart=*/true));
}

}  // namespace mnemo
