// The `titans_lmm` mixer (docs/models.md#titans) and the Titans family registration (titans_lmm, titans_mag,
// titans_mac, model titans_mal).
//   x̃ = [p_1 … p_{N_p}] || RMSNorm(h)        (persistent tokens, first call of a request only)
//   y = LMM(q, k, v; α, η, θ)                  (chunk b, anchor gradients, momentum, decay)
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) ), prefix positions dropped
// Decode state: "lmm_w*", "lmm_s*", "lmm_a*" (memory, momentum, anchor), "lmm_offset" (position in chunk),
// conv caches "conv_q", "conv_k", "conv_v". Prefill + decode == full forward (same absolute chunk alignment).
#include "core/common.h"
#include "runtime/blocks/mixer_common.h"
#include "runtime/no_weight_decay.h"
#include "runtime/registry.h"
#include "runtime/titans/titans.h"

namespace mnemo {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TitansLmmArgs, TITANS_LMM_ARG_NAMES)

LmmCoreOptions titans_core_options(const std::string& family, const MixerContext& ctx, int64_t num_heads,
                                   int64_t head_dim, const json& a) {
  LmmCoreOptions o;
  o.d_in_model = ctx.d_model;
  if (num_heads < 0 || head_dim < 0)
    throw Error(family + ": num_heads and head_dim must be >= 0 (0 = automatic), got " + std::to_string(num_heads) +
                " and " + std::to_string(head_dim));
  o.heads = num_heads > 0 ? num_heads : ctx.n_heads;
  if (o.heads < 1) throw Error(family + ": number of heads must be >= 1, got " + std::to_string(o.heads));
  if (head_dim > 0) {
    o.head_dim = head_dim;
  } else {
    if (ctx.d_model % o.heads != 0)
      throw Error(family + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " +
                  std::to_string(o.heads) + " heads (set head_dim)");
    o.head_dim = ctx.d_model / o.heads;
  }
  o.memory_depth = a.at("memory_depth").get<int64_t>();
  o.expansion = a.at("expansion").get<int64_t>();
  o.chunk_size = a.at("chunk_size").get<int64_t>();
  o.use_momentum = a.at("use_momentum").get<bool>();
  o.use_decay = a.at("use_decay").get<bool>();
  o.use_conv = a.at("use_conv").get<bool>();
  o.conv_size = a.at("conv_size").get<int64_t>();
  o.alpha_bias = a.at("alpha_bias").get<double>();
  o.eta_bias = a.at("eta_bias").get<double>();
  o.theta_bias = a.at("theta_bias").get<double>();
  o.theta_max = a.at("theta_max").get<double>();
  o.inner_grad_clip = a.at("inner_grad_clip").get<double>();
  const std::string form = a.at("form").get<std::string>();
  check_form(family, form);
  o.recurrent = form == "recurrent";
  const int64_t np = a.at("n_persistent").get<int64_t>();
  if (np < 0) throw Error(family + ": n_persistent must be >= 0, got " + std::to_string(np));
  return o;
}

class TitansLmmMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  TitansLmmMixer(const MixerContext& ctx, const TitansLmmArgs& a) : n_p_(a.n_persistent) {
    auto o = titans_core_options("titans_lmm", ctx, a.num_heads, a.head_dim, json(a));
    core_ = register_module("core", LmmCore(o));
    if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
    output_ = register_module("output", GatedOutput(ctx.d_model, o.heads, o.head_dim));
  }

  std::vector<std::string> no_weight_decay() const override {
    return n_p_ > 0 ? std::vector<std::string>{"persistent"} : std::vector<std::string>{};
  }
  // The offset in the chunk stays a tensor in a static step (LmmCore), the rest is fixed-shape.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    const bool fresh = state == nullptr || !state->has("lmm_offset");
    auto xt = x;
    if (fresh && n_p_ > 0)
      xt = torch::cat({persistent_.to(x.scalar_type()).unsqueeze(0).expand({B, n_p_, x.size(2)}), x}, 1);
    auto y = core_(xt, state);
    if (fresh && n_p_ > 0) y = y.narrow(1, n_p_, T);
    return output_(y, x);
  }

 private:
  int64_t n_p_;
  LmmCore core_{nullptr};
  torch::Tensor persistent_;
  GatedOutput output_{nullptr};
};

void register_titans_mag(Registry& r);  // runtime/titans/mag.cpp
void register_titans_mac(Registry& r);  // runtime/titans/mac.cpp

void register_titans_families(Registry& r) {
  r.add_mixer(make_mixer_family<TitansLmmArgs, TitansLmmMixer>(
      "titans_lmm", "Titans LMM: deep neural memory with momentum and decay, chunk-wise dual form (docs/models.md#titans)",
      {deep_memory_flops, {"deep test-time memory", "red"}}));
  register_titans_mag(r);
  register_titans_mac(r);
  ModelFamily mal;
  mal.name = "titans_mal";
  mal.description = "Titans MAL: alternating titans_lmm and swa layers (docs/models.md#titans-mal)";
  mal.layer_pattern = {"titans_lmm", "swa"};
  mal.overrides = json::object();
  mal.style = {"hybrids", "red"};
  mal.cpu_quickstart = true;  // d64 quickstart cell: 17 s (1 thread)
  r.add_model(mal);
}

}  // namespace mnemo
