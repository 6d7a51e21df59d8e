// `hgrn2` mixer: HGRN2 (Qin et al., "HGRN2: Gated Linear RNNs with State Expansion", arXiv 2404.07904 §3;
// docs/models.md#hgrn2), with flash-linear-attention's HGRN2Attention layer and HGRN2 model for the parameterisation
// and the names, so that its checkpoints import:
//   q = SiLU(x W_q), f = x W_f, i = x W_i (optional causal depthwise conv of kernel conv_size on each, no activation)
//   log g = logsigmoid(f); with the lower bound γ_l of layer l > 0: g ← γ_l + (1 − γ_l) g, in log space
//   k = 1 − g (the input gate tied to the forget gate)
//   S_t = Diag(g_t) S_{t−1} + k_tᵀ i_t per head, o_t = (q_t / √d_h) S_t   (the GLA recurrence, runtime/gla/gla.h)
//   out = W_o(RMSNorm(o))   (one RMSNorm over all heads' d_model channels, eps 1e-5)
// Lower bounds (from HGRN, arXiv 2311.04823; fla's use_lower_bound): one learnable row P_l ∈ R^d per layer of the
// model, softmax over the layers, γ_l = Σ_{m<=l} softmax(P)_m − softmax(P)_0, so γ_0 = 0 and γ grows with depth: upper
// layers keep their state longer. The model's first hgrn2 layer holds P [n_layers, d] (fla's model-level
// `lower_bounds`) and hands γ to the others through the model's scratch in each forward; a mixer built on its own is
// layer 0 (γ = 0).
// Decode state: "memory" [B, H, D, D] and the conv caches.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/gla/gla.h"
#include "runtime/hgrn2/fla_names.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"
#include "runtime/mixing_flops.h"
#include "runtime/recurrent_block.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"

namespace mnemo {

struct Hgrn2Args {
  int64_t chunk_size = 64;     // chunk of the GLA chunk form (speed and memory only)
  int64_t gla_sub_chunk = 16;  // rows per block of its intra-chunk matrix
  std::string form = "chunk";  // "chunk" | "recurrent"
  bool use_short_conv = false;
  int64_t conv_size = 4;
  bool use_lower_bound = true;  // fla's HGRN2 default
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Hgrn2Args, chunk_size, gla_sub_chunk, form, use_short_conv, conv_size,
                                                use_lower_bound)

// fla's layer normalises with rms_norm_linear's own eps (1e-5) whatever norm_eps its g_norm was given.
constexpr double kHgrn2NormEps = 1e-5;
constexpr const char* kHgrn2LowerBounds = "hgrn2_lower_bounds";  // scratch key: γ [n_layers, d]

class Hgrn2Mixer : public Mixer {
 public:
  Hgrn2Mixer(const MixerContext& ctx, const Hgrn2Args& a) : args_(a), layer_(ctx.layer_index) {
    check_kernel_form("hgrn2", a.form, a.chunk_size);
    if (a.gla_sub_chunk < 1) throw Error("hgrn2: gla_sub_chunk must be >= 1, got " + std::to_string(a.gla_sub_chunk));
    if (a.use_short_conv && a.conv_size < 1)
      throw Error("hgrn2: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    H_ = ctx.n_heads;
    D_ = head_dim_of("hgrn2", ctx.d_model, H_);
    const int64_t d = ctx.d_model;
    q_proj_ = register_module("q_proj", make_linear(d, d));
    f_proj_ = register_module("f_proj", make_linear(d, d));
    i_proj_ = register_module("i_proj", make_linear(d, d));
    if (a.use_short_conv) {
      q_conv_ = register_module("q_conv", ShortConv(d, a.conv_size, /*silu=*/false));
      f_conv_ = register_module("f_conv", ShortConv(d, a.conv_size, /*silu=*/false));
      i_conv_ = register_module("i_conv", ShortConv(d, a.conv_size, /*silu=*/false));
    }
    g_norm_ = register_module("g_norm", RMSNorm(d, kHgrn2NormEps));
    o_proj_ = register_module("o_proj", make_linear(d, d));
    // The lower bounds need the model's other layers: inside a model of several layers the first hgrn2 layer holds them.
    if (a.use_lower_bound && ctx.scratch && ctx.n_layers > 1) {
      scratch_ = ctx.scratch;
      if (ctx.first_layer_of_mixer)
        lower_bounds_ = register_parameter("lower_bounds", torch::zeros({ctx.n_layers, d}));  // fla's init
    }
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto [q, k, v, log_g] = inputs(x, [&](ShortConv& conv, const torch::Tensor& t, const char* key) {
      return conv(t, state, key);
    });
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H_, D_}); };
    const double scale = 1.0 / std::sqrt(static_cast<double>(D_));
    auto s0 = state_or_empty(state, "memory");
    // On a GPU the chunk form is GLA's fused kernel (its host run is checked with these un-normalised gates in
    // tests/test_cuda_kernels_gla.cpp); on the CPU the eager form.
    RecurrentResult r;
    if (!use_chunked_kernel(args_.form, state, T))
      r = gla_recurrent(heads(q), heads(k), heads(v), heads(log_g), scale, s0);
    else if (gla_chunk_route(q) == GlaChunkRoute::kFusedKernel)
      r = gla_chunk_fused(heads(q), heads(k), heads(v), heads(log_g), GlaGate::kKeyWise, scale, s0, args_.chunk_size);
    else
      r = gla_chunk(heads(q), heads(k), heads(v), heads(log_g), scale, s0, args_.chunk_size, args_.gla_sub_chunk);
    if (state) state->tensors["memory"] = r.final_state.detach();
    return o_proj_(g_norm_(r.o.to(x.scalar_type()).reshape({B, T, H_ * D_})));
  }

  // Packed sequences: GLA's fused kernel with cu_seqlens, the short convs restarting at each document
  // (docs/models.md#packed-sequences).
  bool packs_sequences(const torch::Tensor& x) const override {
    return args_.form == "chunk" && packed_forms_enabled(x, gla_fused_kernel_available(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    const int64_t N = x.size(1);
    auto [q, k, v, log_g] = inputs(x, [&](ShortConv& conv, const torch::Tensor& t, const char*) {
      return conv->forward_packed(t, seqs);
    });
    auto heads = [&](const torch::Tensor& t) { return t.view({1, N, H_, D_}); };
    const double scale = 1.0 / std::sqrt(static_cast<double>(D_));
    auto r = gla_chunk_fused(heads(q), heads(k), heads(v), heads(log_g), GlaGate::kKeyWise, scale, {},
                             args_.chunk_size, seqs.cu_seqlens);
    return o_proj_(g_norm_(r.o.to(x.scalar_type()).reshape({1, N, H_ * D_})));
  }

 private:
  // q = SiLU(conv(x W_q)), the input v = conv(x W_i), the log forget gate (with this layer's lower bound) and
  // k = 1 − g, all [B, T, d]; `conv(c, t, cache_key)` runs a short conv (skipped without use_short_conv).
  struct Inputs {
    torch::Tensor q, k, v, log_g;
  };
  template <class Conv>
  Inputs inputs(const torch::Tensor& x, Conv&& conv) {
    auto q = q_proj_(x), f = f_proj_(x), v = i_proj_(x);
    if (args_.use_short_conv) {
      q = conv(q_conv_, q, "conv_q");
      f = conv(f_conv_, f, "conv_f");
      v = conv(i_conv_, v, "conv_i");
    }
    q = torch::silu(q);
    const auto dt = recurrence_dtype(x);
    auto log_g = torch::log_sigmoid(f.to(dt));  // [B, T, d]
    if (auto gamma = lower_bound(dt); gamma.defined())
      log_g = torch::logaddexp(gamma.log(), torch::log1p(-gamma) + log_g);  // g = γ + (1 − γ) σ(f)
    auto k = (1 - log_g.exp()).to(x.scalar_type());
    return {q, k, v, log_g};
  }

  // γ of this layer [d] (undefined: no lower bound). The holder of the bounds computes every layer's γ first.
  torch::Tensor lower_bound(torch::ScalarType dt) {
    if (!scratch_) return {};
    if (lower_bounds_.defined()) {
      auto p = torch::softmax(lower_bounds_.to(dt), 0);
      scratch_->tensors[kHgrn2LowerBounds] = p.cumsum(0) - p.narrow(0, 0, 1);
    }
    if (layer_ == 0) return {};  // γ_0 = 0: fla applies no bound to its first layer
    auto it = scratch_->tensors.find(kHgrn2LowerBounds);
    if (it == scratch_->tensors.end() || it->second.size(0) <= layer_)
      throw Error("hgrn2: the lower bounds come from the model's first hgrn2 layer, which did not run before layer " +
                  std::to_string(layer_));
    return it->second.select(0, layer_);
  }

  Hgrn2Args args_;
  int64_t layer_ = 0, H_ = 0, D_ = 0;
  torch::nn::Linear q_proj_{nullptr}, f_proj_{nullptr}, i_proj_{nullptr}, o_proj_{nullptr};
  ShortConv q_conv_{nullptr}, f_conv_{nullptr}, i_conv_{nullptr};
  RMSNorm g_norm_{nullptr};
  torch::Tensor lower_bounds_;                // [n_layers, d] on the model's first hgrn2 layer
  std::shared_ptr<ModelScratch> scratch_;  // set inside a model of several layers with use_lower_bound
};

void register_hgrn2_family(Registry& r) {
  r.add_mixer(make_mixer_family<Hgrn2Args, Hgrn2Mixer>(
      "hgrn2",
      "HGRN2: gated linear RNN with state expansion, input gate 1 - forget gate, layer-wise lower bounds "
      "(docs/models.md#hgrn2)",
      {chunked_recurrence_flops,
       {"linear recurrent", "red", {{"use_lower_bound", "lower bound"}, {"use_short_conv", "short conv"}}},
       2e-3,
       {hgrn2_fla_names()},
       {{"use_lower_bound", "layer l's forget gate is at least gamma_l = sum_{m<=l} softmax(P)_m - softmax(P)_0, "
                            "P [n_layers, d] learnable (held by the model's first hgrn2 layer)"},
        {"gla_sub_chunk", "rows per block of the intra-chunk decayed score matrix (numerics and speed only)"},
        {"use_short_conv", "causal depthwise convolution (no activation) on q, f and i"}}}));
}

}  // namespace mnemo
