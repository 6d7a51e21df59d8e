// Atlas hybrids (spec models.md §7.9): "we follow Titans and use two hybrid variants of MAL and MAG", with the
// ATLAS memory (Omega rule + Muon, atlas_core.h) in place of the Titans LMM; N_p = 4, SWA window 2048 [decision].
//   atlas_mag (§5.7 wiring, as runtime/titans/mag.cpp):
//     x̃ = [p_1 … p_{N_p}] || x ;  y = SW-Attn*(x̃) (window W, prefix always visible) ;  m = ATLAS(x̃)
//     o = W_o( RMSNorm_a(y) ⊙ σ(RMSNorm_b(m)) ), prefix positions dropped.
//   atlas_mal (§5.8): alternating atlas and swa layers (a layer pattern; the atlas layers carry no persistent tokens).
// Decode state of atlas_mag: the core state ("atlas_*", "conv_*"), "mag_pk"/"mag_pv" (prefix keys/values),
// "mag_wk"/"mag_wv" (the last <= W keys/values), "mag_pos".
#include "runtime/atlas/atlas_core.h"
#include "runtime/registry.h"
#include "runtime/titans/titans.h"

namespace mnemo {

namespace {

struct AtlasMagArgs {
  ATLAS_GD_FIELDS(16, 8, "mlp", "l2", 5.0, 0.02, true)
  double theta_bias = 2.0;
  int64_t ns_steps = 5;
  int64_t n_persistent = 4;  // N_p (§5.5, §7.9)
  int64_t window = 2048;     // SWA window W (keys (t-W, t], plus the prefix)
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AtlasMagArgs, ATLAS_GD_NAMES, theta_bias, ns_steps, n_persistent,
                                                window, rope_theta, q_block)

class AtlasMagMixer : public Mixer {
 public:
  AtlasMagMixer(const MixerContext& ctx, const AtlasMagArgs& a) : args_(a), n_p_(a.n_persistent) {
    auto o = atlas_core_options("atlas_mag", ctx, json(a), true);
    if (a.window < 1) throw Error("atlas_mag: window must be >= 1, got " + std::to_string(a.window));
    if (a.n_persistent < 0) throw Error("atlas_mag: n_persistent must be >= 0, got " + std::to_string(a.n_persistent));
    heads_ = ctx.n_heads;
    if (heads_ < 1 || ctx.d_model % heads_ != 0)
      throw Error("atlas_mag: d_model " + std::to_string(ctx.d_model) + " is not divisible by n_heads " +
                  std::to_string(heads_));
    dh_ = ctx.d_model / heads_;
    core_ = register_module("core", AtlasCore(o));
    if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
    q_proj_ = register_module("q_proj", make_linear(ctx.d_model, ctx.d_model));
    k_proj_ = register_module("k_proj", make_linear(ctx.d_model, ctx.d_model));
    v_proj_ = register_module("v_proj", make_linear(ctx.d_model, ctx.d_model));
    norm_a_ = register_module("norm_attn", RMSNorm(ctx.d_model));
    norm_b_ = register_module("norm_mem", RMSNorm(ctx.d_model));
    o_proj_ = register_module("o_proj", make_linear(ctx.d_model, ctx.d_model));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
    const bool fresh = state == nullptr || !state->has(core_->opt.key + "_offset");
    const int64_t pos = fresh ? 0 : titans_state_int(state, "mag_pos");
    torch::Tensor prefix;
    if (n_p_ > 0) prefix = persistent_.to(x.scalar_type()).unsqueeze(0).expand({B, n_p_, D});

    // Memory branch over x̃ (the prefix is absorbed on the first call only).
    auto xt = (fresh && n_p_ > 0) ? torch::cat({prefix, x}, 1) : x;
    auto m = core_(xt, state).to(x.scalar_type());
    if (fresh && n_p_ > 0) m = m.narrow(1, n_p_, T);
    m = m.reshape({B, T, D});

    // Attention branch (RoPE: prefix at 0..N_p-1, token t at N_p + t).
    auto heads = [&](torch::nn::Linear& p, const torch::Tensor& in, int64_t offset) {
      auto h = p(in).view({in.size(0), in.size(1), heads_, dh_}).transpose(1, 2);
      return &p == &v_proj_ ? h : apply_rope(h, offset, args_.rope_theta);
    };
    auto q = heads(q_proj_, x, n_p_ + pos), k = heads(k_proj_, x, n_p_ + pos), v = heads(v_proj_, x, n_p_ + pos);
    torch::Tensor pk, pv;
    if (!fresh && state->has("mag_pk")) {
      pk = state->at("mag_pk").to(x.scalar_type());
      pv = state->at("mag_pv").to(x.scalar_type());
    } else {
      pk = n_p_ > 0 ? heads(k_proj_, prefix, 0) : k.narrow(2, 0, 0);
      pv = n_p_ > 0 ? heads(v_proj_, prefix, 0) : v.narrow(2, 0, 0);
    }
    torch::Tensor ck = k.narrow(2, 0, 0), cv = v.narrow(2, 0, 0);
    if (!fresh && state->has("mag_wk")) {
      ck = state->at("mag_wk").to(x.scalar_type());
      cv = state->at("mag_wv").to(x.scalar_type());
    }
    const int64_t nc = ck.size(2);
    auto keys = torch::cat({pk, ck, k}, 2), vals = torch::cat({pv, cv, v}, 2);
    auto io = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
    auto kpos = torch::cat({torch::arange(0, n_p_, io), torch::arange(n_p_ + pos - nc, n_p_ + pos + T, io)});
    auto qpos = torch::arange(n_p_ + pos, n_p_ + pos + T, io);
    auto y = titans_attention(q, qpos, keys, vals, kpos, args_.window, n_p_, args_.q_block);
    y = y.transpose(1, 2).reshape({B, T, D});

    if (state) {
      auto wk = torch::cat({ck, k}, 2), wv = torch::cat({cv, v}, 2);
      const int64_t keep = std::min<int64_t>(wk.size(2), args_.window);
      state->tensors["mag_wk"] = wk.narrow(2, wk.size(2) - keep, keep).detach().clone();
      state->tensors["mag_wv"] = wv.narrow(2, wv.size(2) - keep, keep).detach().clone();
      state->tensors["mag_pk"] = pk.detach();
      state->tensors["mag_pv"] = pv.detach();
      titans_set_state_int(state, "mag_pos", pos + T);
    }
    return o_proj_(norm_a_(y) * torch::sigmoid(norm_b_(m)));
  }

 private:
  AtlasMagArgs args_;
  int64_t n_p_, heads_ = 0, dh_ = 0;
  AtlasCore core_{nullptr};
  torch::Tensor persistent_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  RMSNorm norm_a_{nullptr}, norm_b_{nullptr};
};

}  // namespace

void register_atlas_hybrids(Registry& r) {
  r.add_mixer(make_mixer_family<AtlasMagArgs, AtlasMagMixer>(
      "atlas_mag", "ATLAS MAG: SWA (prefix always visible) gated by the ATLAS memory branch (models.md §7.9, §5.7)",
      /*cpu_quickstart=*/false));
  ModelFamily mal;
  mal.name = "atlas_mal";
  mal.description = "ATLAS MAL: alternating atlas and swa layers (models.md §7.9, §5.8)";
  mal.layer_pattern = {"atlas", "swa"};
  mal.overrides = json::object();
  mal.cpu_quickstart = false;
  r.add_model(mal);
}

}  // namespace mnemo
