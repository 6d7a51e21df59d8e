// `gsa` mixer: Gated Slot Attention (Zhang et al., arXiv 2409.07146 §3; docs/models.md#gsa), with
// flash-linear-attention's GatedSlotAttention layer for the parameterisation and the names, so that its checkpoints
// import:
//   q = SiLU(x W_q), k = SiLU(x W_k), v = SiLU(x W_v)   (swish feature map on q, k; with use_short_conv a causal
//                                                        depthwise conv + SiLU on each first, as fla's)
//   g = logsigmoid(x W_f) / gate_logit_normalizer  [M slots per head],  s = 1 − e^{g}
//   o = GSA(q, k, v, s, g) with scale 1 (runtime/gsa/gsa.h)
//   out = W_o(RMSNorm(SiLU(o)))   (one RMSNorm over all heads' values, eps 1e-5: fla's rms_norm_linear)
// Decode state: "memory" K̃ [B, H, K, M], "memory_v" Ṽ [B, H, M, V] and the conv caches.
#include "runtime/blocks/mixer_common.h"
#include "runtime/gsa/gsa.h"
#include "runtime/layers.h"
#include "runtime/mixing_flops.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct GsaArgs {
  int64_t chunk_size = 64;
  std::string form = "chunk";  // "chunk" | "recurrent"
  int64_t num_slots = 64;      // M, slots per head (fla's GSA config default)
  double gate_logit_normalizer = 8.0;
  double expand_k = 1.0, expand_v = 1.0;  // key / value width = expand · d_model over the heads
  bool use_short_conv = false;
  int64_t conv_size = 4;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GsaArgs, chunk_size, form, num_slots, gate_logit_normalizer, expand_k,
                                                expand_v, use_short_conv, conv_size)

// fla's rms_norm_linear normalises with its own eps whatever norm_eps the layer's g_norm was given.
constexpr double kGsaNormEps = 1e-5;

class GsaMixer : public Mixer {
 public:
  GsaMixer(const MixerContext& ctx, const GsaArgs& a) : args_(a) {
    check_kernel_form("gsa", a.form, a.chunk_size);
    if (a.num_slots < 1) throw Error("gsa: num_slots must be >= 1, got " + std::to_string(a.num_slots));
    if (!(a.gate_logit_normalizer > 0))
      throw Error("gsa: gate_logit_normalizer must be > 0, got " + std::to_string(a.gate_logit_normalizer));
    if (a.use_short_conv && a.conv_size < 1) throw Error("gsa: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    H_ = ctx.n_heads;
    M_ = a.num_slots;
    K_ = expanded_head_dim("gsa", "expand_k", ctx.d_model, a.expand_k, H_);
    V_ = expanded_head_dim("gsa", "expand_v", ctx.d_model, a.expand_v, H_);
    const int64_t d = ctx.d_model;
    q_proj_ = register_module("q_proj", make_linear(d, H_ * K_));
    k_proj_ = register_module("k_proj", make_linear(d, H_ * K_));
    v_proj_ = register_module("v_proj", make_linear(d, H_ * V_));
    f_proj_ = register_module("f_proj", make_linear(d, H_ * M_));
    if (a.use_short_conv) {
      q_conv_ = register_module("q_conv", ShortConv(H_ * K_, a.conv_size, /*silu=*/true));
      k_conv_ = register_module("k_conv", ShortConv(H_ * K_, a.conv_size, /*silu=*/true));
      v_conv_ = register_module("v_conv", ShortConv(H_ * V_, a.conv_size, /*silu=*/true));
    }
    g_norm_ = register_module("g_norm", RMSNorm(H_ * V_, kGsaNormEps));
    o_proj_ = register_module("o_proj", make_linear(H_ * V_, d));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);
    if (args_.use_short_conv) {
      q = q_conv_(q, state, "conv_q");
      k = k_conv_(k, state, "conv_k");
      v = v_conv_(v, state, "conv_v");
    }
    q = torch::silu(q).view({B, T, H_, K_});
    k = torch::silu(k).view({B, T, H_, K_});
    v = torch::silu(v).view({B, T, H_, V_});
    const auto dt = recurrence_dtype(x);
    auto g = (torch::log_sigmoid(f_proj_(x).to(dt)) / args_.gate_logit_normalizer).view({B, T, H_, M_});
    auto s = 1 - g.exp();
    auto k0 = state_or_empty(state, "memory"), v0 = state_or_empty(state, "memory_v");
    // On a GPU the second pass runs GLA's fused kernels (runtime/gla/chunk_kernel.cuh); the first stays eager.
    auto r = use_chunked_kernel(args_.form, state, T)
                 ? gsa_chunk(q, k, v, s, g, 1.0, k0, v0, args_.chunk_size, gla_chunk_route(q))
                 : gsa_recurrent(q, k, v, s, g, 1.0, k0, v0);
    if (state) {
      state->tensors["memory"] = r.key_slots.detach();
      state->tensors["memory_v"] = r.value_slots.detach();
    }
    return o_proj_(g_norm_(torch::silu(r.o.to(x.scalar_type())).reshape({B, T, H_ * V_})));
  }

  bool decode_step_is_static() const override { return true; }

 private:
  GsaArgs args_;
  int64_t H_ = 0, M_ = 0, K_ = 0, V_ = 0;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, f_proj_{nullptr}, o_proj_{nullptr};
  ShortConv q_conv_{nullptr}, k_conv_{nullptr}, v_conv_{nullptr};
  RMSNorm g_norm_{nullptr};
};

// fla's "gsa" (fla/layers/gsa.py GatedSlotAttention, fla/models/gsa): q/k/v/f Linear without bias (+
// ShortConvolution with SiLU, no bias), swish feature map on q and k, SiLU on v, f = logsigmoid(f) /
// gate_logit_normalizer, s = 1 - exp(f), chunk_gsa / fused_recurrent_gsa with scale 1, then rms_norm_linear(SiLU(o))
// (eps 1e-5) and o_proj; vs runtime/gsa/mixer.cpp. Refused: another feature map, use_output_gate, use_norm false,
// shared key/value heads, a conv bias.
static FlaMixerNames gsa_fla_names() {
  FlaMixerNames n;
  n.model_type = "gsa";
  n.defaults = {{"num_heads", 4},       {"num_kv_heads", nullptr},    {"num_slots", 64},
                {"gate_logit_normalizer", 8}, {"clamp_min", nullptr}, {"clamp_max", nullptr},
                {"expand_k", 1},        {"expand_v", 1},              {"use_short_conv", false},
                {"conv_size", 4},       {"feature_map", "swish"},     {"use_output_gate", false},
                {"use_norm", true},     {"elementwise_affine", true}, {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_heads_divide(d, H);
    c.require_same_kv_heads("num_kv_heads", H);
    if (c.config.at("feature_map") != "swish")
      c.refuse("feature_map " + json_excerpt(c.config.at("feature_map")) + ": mnemo's GSA uses the swish map");
    if (c.flag("use_output_gate")) c.refuse("use_output_gate: mnemo's GSA has no output gate");
    if (!c.flag("use_norm")) c.refuse("use_norm false: mnemo's GSA normalises its output");
    if (!c.is_null("clamp_min") || !c.is_null("clamp_max"))
      c.refuse("clamp_min / clamp_max: mnemo does not clamp GSA's gates");
    const int64_t key_dim = c.exact_dim("expand_k", d, H);
    if (c.exact_dim("expand_v", d, H) != d)
      c.refuse("expand_v " + json_excerpt(c.config.at("expand_v")) + ": fla's output norm is over hidden_size");
    keys["num_slots"] = c.is_null("num_slots") ? key_dim / H : c.integer("num_slots");  // fla: head_k_dim
    keys["gate_logit_normalizer"] = c.number("gate_logit_normalizer");
    keys["expand_k"] = c.number("expand_k");
    keys["expand_v"] = c.number("expand_v");
    keys["use_short_conv"] = c.flag("use_short_conv");
    keys["conv_size"] = c.integer("conv_size");
    return "gsa";
  };
  n.from_mnemo = [](json& view, json& c) {  // the fields to_mnemo reads, back from the mixer's arguments
    c["num_slots"] = view.value("num_slots", int64_t{64});
    c["gate_logit_normalizer"] = view.value("gate_logit_normalizer", 8.0);
    c["expand_k"] = view.value("expand_k", 1.0);
    c["expand_v"] = view.value("expand_v", 1.0);
  };
  n.mixer_keys = [](const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"q", "k", "v", "f", "o"}) map[at.mnemo + p + "_proj.weight"] = {{at.fla + p + "_proj.weight"}};
    if (keys.at("use_short_conv").get<bool>())
      for (const char* p : {"q", "k", "v"}) map[at.mnemo + p + "_conv.weight"] = {{at.fla + p + "_conv1d.weight"}};
    if (fla_config.value("elementwise_affine", true))
      map[at.mnemo + "g_norm.weight"] = {{at.fla + "g_norm.weight"}};
    else
      map[at.mnemo + "g_norm.weight"] = {{}, FlaSource::Fill::ones};
  };
  return n;
}

void register_gsa_family(Registry& r) {
  r.add_mixer(make_mixer_family<GsaArgs, GsaMixer>(
      "gsa",
      "Gated Slot Attention: two gated linear-attention passes over num_slots slots per head, joined by a softmax "
      "over the slots (docs/models.md#gsa)",
      {sum_of(chunked_recurrence_flops, chunked_recurrence_flops),
       {"linear recurrent", "blue", {{"use_short_conv", "short conv"}}},
       2e-3,
       {gsa_fla_names()},
       {{"num_slots", "memory slots M per head (the softmax runs over them)"},
        {"gate_logit_normalizer", "the forget gate is logsigmoid(x W_f) / gate_logit_normalizer"},
        {"use_short_conv", "causal depthwise convolution + SiLU on q, k and v"}}}));
}

}  // namespace mnemo
