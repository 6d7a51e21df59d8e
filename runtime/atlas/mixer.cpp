// Atlas GD/Muon mixers (docs/models.md#dla-swla-and-omeganet, docs/models.md#atlas, docs/models.md#atlas-family): dla, swla, omeganet, atlas, atlas_pp, and the core they
// share (atlas_core.h). Mixer: out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) ) (docs/models.md#shared-building-blocks).
#include <cmath>

#include "runtime/atlas/atlas_core.h"
#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/no_weight_decay.h"
#include "core/common.h"
#include "runtime/registry.h"

namespace mnemo {

FeatureMapImpl::FeatureMapImpl(const std::string& k, int64_t d_, int64_t p) : kind(k), d(d_), degree(p) {
  if (kind == "taylor_elementwise") {
    if (p < 1) throw Error("atlas: phi_degree must be >= 1, got " + std::to_string(p));
    std::vector<double> a;
    double f = 1.0;
    for (int64_t i = 1; i <= p; ++i) a.push_back(1.0 / (f *= static_cast<double>(i)));  // a_i = 1/i!
    coef = register_parameter("coef", torch::tensor(a, torch::kFloat32));
    D = p * d;
  } else if (kind == "taylor_full2") {
    auto iu = torch::triu_indices(d, d, 0);
    iu_r = iu[0].clone();
    iu_c = iu[1].clone();
    D = 1 + d + d * (d + 1) / 2;
  } else if (kind == "identity") {
    D = d;
  } else {
    throw Error("atlas: phi must be \"taylor_elementwise\", \"taylor_full2\" or \"identity\", got \"" + kind + "\"");
  }
}

torch::Tensor FeatureMapImpl::forward(const torch::Tensor& x) {
  if (kind == "identity") return x;
  if (kind == "taylor_elementwise") {  // concat(a_1 x, a_2 x⊙x, …)
    auto a = coef.to(x.scalar_type());
    std::vector<torch::Tensor> parts;
    auto xp = x;
    for (int64_t i = 0; i < degree; ++i) {
      if (i > 0) xp = xp * x;
      parts.push_back(a[i] * xp);
    }
    return torch::cat(parts, -1);
  }
  const double sd = std::sqrt(static_cast<double>(d));
  auto outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2);  // [.., d*d]
  auto idx = (iu_r * d + iu_c).to(x.device());
  auto scale = torch::where(iu_r == iu_c, torch::full({}, 1.0 / (std::sqrt(2.0) * sd)), torch::full({}, 1.0 / sd))
                   .to(x.options());
  auto quad = outer.index_select(-1, idx) * scale;
  auto sizes = x.sizes().vec();
  sizes.back() = 1;
  return torch::cat({torch::ones(sizes, x.options()), x / std::sqrt(sd), quad}, -1);
}

AtlasCoreImpl::AtlasCoreImpl(const AtlasCoreOptions& o) : opt(o) {
  const auto& f = o.family;
  if (o.heads < 1 || o.head_dim < 1) throw Error(f + ": heads and head_dim must be >= 1");
  if (o.conv_size < 1) throw Error(f + ": conv_size must be >= 1, got " + std::to_string(o.conv_size));
  if (o.eta_max < 0) throw Error(f + ": eta_max must be >= 0 (0: 1/omega_window), got " + std::to_string(o.eta_max));
  if (o.memory != "mlp" && o.memory != "linear" && o.memory != "gated_mlp")
    throw Error(f + ": memory must be \"mlp\", \"linear\" or \"gated_mlp\", got \"" + o.memory + "\"");
  kernel.loss = o.loss;
  kernel.window = o.window;
  kernel.chunk = o.chunk_size;
  kernel.muon = o.muon;
  kernel.ns_steps = o.ns_steps;
  kernel.readout = o.readout;
  kernel.ns_granularity = o.ns_granularity;
  kernel.ns_precision = o.ns_precision;
  kernel.recompute = o.recompute;
  if (o.muon) {
    if (o.ns_steps < 0) throw Error(f + ": ns_steps must be >= 0, got " + std::to_string(o.ns_steps));
    check_muon_options(kernel, f);
  }
  if (o.window < 1) throw Error(f + ": omega_window must be >= 1, got " + std::to_string(o.window));
  if (o.chunk_size < 1) throw Error(f + ": chunk_size must be >= 1, got " + std::to_string(o.chunk_size));
  if (o.loss != "l2" && o.loss != "dot") throw Error(f + ": loss must be \"l2\" or \"dot\", got \"" + o.loss + "\"");
  phi = register_module("phi", FeatureMap(o.phi, o.head_dim, o.phi_degree));
  spec.kind = o.memory == "linear" ? MemoryKind::Linear
                                   : o.memory == "gated_mlp" ? MemoryKind::GatedMLP : MemoryKind::ResidualMLP;
  spec.d_in = spec.d_out = o.head_dim;
  spec.d_feat = phi->dim();
  spec.expansion = o.expansion;
  spec.validate(f);
  auto proj = [&](bool l2, const std::string& name) {
    return register_module(name + "_proj", HeadProjection(template_projection(o.d_model, o.heads, o.head_dim,
                                                                              o.use_short_conv, o.conv_size, l2),
                                                          name));
  };
  q_proj = proj(true, "q");
  k_proj = proj(true, "k");
  v_proj = proj(false, "v");
  const int64_t n_gates = o.muon ? 4 : 3;
  gate_proj = register_module("gate_proj", make_linear(o.d_model, n_gates * o.heads, /*bias=*/true));
  {
    torch::NoGradGuard ng;
    auto b = gate_proj->bias.view({n_gates, o.heads});
    b[0].fill_(o.alpha_bias);
    b[1].fill_(o.eta_bias);
    b[2].fill_(o.gamma_bias);
    if (o.muon) b[3].fill_(o.theta_bias);
  }
  auto w0 = init_memory_weights(spec, o.heads);  // Xavier-uniform (docs/models.md#deep-memory)
  for (size_t l = 0; l < w0.size(); ++l)
    init_weights.push_back(register_parameter("memory_init_" + std::to_string(l), w0[l]));
}

std::vector<std::string> AtlasCoreImpl::no_weight_decay() const {
  std::vector<std::string> names;
  for (size_t l = 0; l < init_weights.size(); ++l) names.push_back("memory_init_" + std::to_string(l));
  return names;
}

MemoryWeights AtlasCoreImpl::current_weights(LayerState* state, int64_t batch, torch::ScalarType dt) {
  return current_memory_weights(init_weights, opt.key, state, batch, dt);
}

torch::Tensor AtlasCoreImpl::read(const MemoryWeights& w, const torch::Tensor& x, LayerState* state,
                                  const std::string& key, bool detach) {
  auto q = q_proj->forward_keyed(x, state, key, detach).to(w[0].scalar_type()).transpose(1, 2);  // [B, H, T, d]
  return memory_apply(spec, w, q, {}, phi(q)).transpose(1, 2);
}

torch::Tensor AtlasCoreImpl::forward(const torch::Tensor& x, LayerState* state, bool detach) {
  const int64_t B = x.size(0), T = x.size(1), H = opt.heads;
  const auto dt = recurrence_dtype(x);
  auto proj = [&](HeadProjection& p) { return p->forward_keyed(x, state, "conv_" + p->name, detach).to(dt); };
  auto q = proj(q_proj), k = proj(k_proj), v = proj(v_proj);
  OmegaInputs in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.qf = phi(q);
  in.kf = phi(k);
  const int64_t n_gates = opt.muon ? 4 : 3;
  auto z = gate_proj(x).to(dt).view({B, T, n_gates, H});
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: projections above under autocast, the memory below in fp32
  in.log_alpha = torch::log_sigmoid(z.select(2, 0));
  const double eta_max = opt.eta_max > 0 ? opt.eta_max : 1.0 / static_cast<double>(opt.window);
  in.eta = eta_max * torch::sigmoid(z.select(2, 1));
  if (opt.use_gamma) in.gamma = torch::sigmoid(z.select(2, 2));
  if (opt.muon) in.log_theta = torch::log_sigmoid(z.select(2, 3));

  const auto& K = opt.key;
  OmegaState init;
  const bool fresh = state == nullptr || !state->has(K + "_offset");
  for (size_t l = 0; l < init_weights.size(); ++l) {
    const auto i = std::to_string(l);
    if (!fresh) {
      init.w.push_back(state->at(K + "_w" + i));
      init.anchor.push_back(state->at(K + "_a" + i));
      if (opt.muon) init.s.push_back(state->at(K + "_s" + i));
    } else {
      const auto& p = init_weights[l];
      init.w.push_back(p.to(dt).unsqueeze(0).expand({B, p.size(0), p.size(1), p.size(2)}));
    }
  }
  if (!fresh) {
    init.offset = state->at(K + "_offset").item<int64_t>();
    init.buf_k = state->at(K + "_bk");
    init.buf_kf = state->at(K + "_bkf");
    init.buf_v = state->at(K + "_bv");
    init.buf_g = state->at(K + "_bg");
    if (state->has(K + "_nsa")) {
      init.ns_decay = state->at(K + "_nsa");
      init.ns_step = state->at(K + "_nsc");
    }
  }
  const bool recurrent = opt.recurrent || (state != nullptr && T == 1);
  auto r = recurrent ? omega_recurrent(spec, kernel, in, init) : omega_chunk(spec, kernel, in, init);
  if (state) {
    auto keep = [&](const torch::Tensor& t) { return detach ? t.detach() : t; };
    for (size_t l = 0; l < r.state.w.size(); ++l) {
      const auto i = std::to_string(l);
      state->tensors[K + "_w" + i] = keep(r.state.w[l]);
      state->tensors[K + "_a" + i] = keep(r.state.anchor[l]);
      if (opt.muon) state->tensors[K + "_s" + i] = keep(r.state.s[l]);
    }
    state->tensors[K + "_offset"] = torch::tensor(r.state.offset, torch::kInt64);
    state->tensors[K + "_bk"] = keep(r.state.buf_k);
    state->tensors[K + "_bkf"] = keep(r.state.buf_kf);
    state->tensors[K + "_bv"] = keep(r.state.buf_v);
    state->tensors[K + "_bg"] = keep(r.state.buf_g);
    if (r.state.ns_decay.defined()) {
      state->tensors[K + "_nsa"] = keep(r.state.ns_decay);
      state->tensors[K + "_nsc"] = keep(r.state.ns_step);
    }
  }
  return r.y;
}

// ---------------------------------------------------------------------------------------------
// Args (docs/models.md#atlas-family defaults; field macros in atlas_core.h).

struct DlaArgs {
  ATLAS_GD_FIELDS(64, 1, "mlp", "dot", 6.0, 0.1, false)
};
struct SwlaArgs {
  ATLAS_GD_FIELDS(64, 8, "mlp", "dot", 6.0, 0.0, true)
};
struct OmegaNetArgs {
  ATLAS_GD_FIELDS(64, 8, "mlp", "l2", 6.0, 0.0, true)
};
struct AtlasArgs {
  ATLAS_GD_FIELDS(16, 8, "mlp", "l2", 5.0, 0.02, true)
  ATLAS_MUON_FIELDS
  int64_t n_persistent = 0;  // N_p persistent tokens (docs/models.md#titans); 0 for ATLAS alone, 4 in atlas_mal (§7.9)
};
struct AtlasPPArgs : AtlasArgs {
  AtlasPPArgs() { memory = "gated_mlp"; }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DlaArgs, ATLAS_GD_NAMES)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SwlaArgs, ATLAS_GD_NAMES)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OmegaNetArgs, ATLAS_GD_NAMES)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AtlasArgs, ATLAS_GD_NAMES, ATLAS_MUON_NAMES, n_persistent)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AtlasPPArgs, ATLAS_GD_NAMES, ATLAS_MUON_NAMES, n_persistent)

// Resolves the core options of any Atlas args struct (json view) for `family`.
AtlasCoreOptions atlas_core_options(const std::string& family, const MixerContext& ctx, const json& a, bool muon) {
  AtlasCoreOptions o;
  o.family = family;
  o.d_model = ctx.d_model;
  const int64_t nh = a.at("num_heads").get<int64_t>();
  if (nh < 0) throw Error(family + ": num_heads must be >= 0 (0 = the model's), got " + std::to_string(nh));
  o.heads = nh > 0 ? nh : ctx.n_heads;
  if (o.heads < 1 || ctx.d_model % o.heads != 0)
    throw Error(family + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by " +
                std::to_string(o.heads) + " heads");
  o.head_dim = ctx.d_model / o.heads;
  o.chunk_size = a.at("chunk_size").get<int64_t>();
  o.window = a.at("omega_window").get<int64_t>();
  o.conv_size = a.at("conv_size").get<int64_t>();
  o.use_short_conv = a.at("use_short_conv").get<bool>();
  const auto form = a.at("form").get<std::string>();
  check_form(family, form);
  o.recurrent = form == "recurrent";
  o.memory = a.at("memory").get<std::string>();
  o.expansion = a.at("expansion").get<int64_t>();
  o.phi = a.at("phi").get<std::string>();
  o.phi_degree = a.at("phi_degree").get<int64_t>();
  o.loss = a.at("loss").get<std::string>();
  o.alpha_bias = a.at("alpha_bias").get<double>();
  o.eta_max = a.at("eta_max").get<double>();
  o.eta_bias = a.at("eta_bias").get<double>();
  o.use_gamma = a.at("use_gamma").get<bool>();
  o.gamma_bias = a.at("gamma_bias").get<double>();
  o.muon = muon;
  if (muon) {
    o.theta_bias = a.at("theta_bias").get<double>();
    o.ns_steps = a.at("ns_steps").get<int64_t>();
    o.readout = a.at("atlas_readout").get<std::string>();
    o.ns_granularity = a.at("ns_granularity").get<std::string>();
    o.ns_precision = a.at("ns_precision").get<std::string>();
    o.recompute = a.at("atlas_recompute").get<bool>();
  }
  return o;
}

namespace {

class AtlasMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  AtlasMixer(const MixerContext& ctx, const DlaArgs& a) : AtlasMixer(ctx, atlas_core_options("dla", ctx, json(a), false)) {}
  AtlasMixer(const MixerContext& ctx, const SwlaArgs& a)
      : AtlasMixer(ctx, atlas_core_options("swla", ctx, json(a), false)) {}
  AtlasMixer(const MixerContext& ctx, const OmegaNetArgs& a)
      : AtlasMixer(ctx, atlas_core_options("omeganet", ctx, json(a), false)) {}
  AtlasMixer(const MixerContext& ctx, const AtlasArgs& a)
      : AtlasMixer(ctx, atlas_core_options("atlas", ctx, json(a), true), a.n_persistent) {}
  AtlasMixer(const MixerContext& ctx, const AtlasPPArgs& a)
      : AtlasMixer(ctx, atlas_core_options("atlas_pp", ctx, json(a), true), a.n_persistent) {}

  // x̃ = [p_1 … p_{N_p}] || x on the first call of a request (docs/models.md#titans, as titans_lmm); prefix outputs dropped.
  std::vector<std::string> no_weight_decay() const override {
    return n_p_ > 0 ? std::vector<std::string>{"persistent"} : std::vector<std::string>{};
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    const bool prefix = n_p_ > 0 && (state == nullptr || !state->has(core_->opt.key + "_offset"));
    if (!prefix) return output_(core_(x, state), x);
    auto p = persistent_.to(x.scalar_type()).unsqueeze(0).expand({B, n_p_, x.size(2)});
    return output_(core_(torch::cat({p, x}, 1), state).narrow(1, n_p_, T), x);
  }

 private:
  AtlasMixer(const MixerContext& ctx, const AtlasCoreOptions& o, int64_t n_persistent = 0) : n_p_(n_persistent) {
    if (n_p_ < 0) throw Error(o.family + ": n_persistent must be >= 0, got " + std::to_string(n_p_));
    core_ = register_module("core", AtlasCore(o));
    if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
    output_ = register_module("output", GatedOutput(ctx.d_model, o.heads, o.head_dim));
  }
  int64_t n_p_ = 0;
  AtlasCore core_{nullptr};
  torch::Tensor persistent_;
  GatedOutput output_{nullptr};
};

}  // namespace

void register_atlas_hybrids(Registry& r);  // runtime/atlas/hybrid.cpp

// CPU quickstart: dla, swla, omeganet yes (d_model-64 quickstart cell, 1 thread: 20, 21, 22 s). ATLAS no: the exact
// form runs Newton-Schulz-5 on every token's memory weights (docs/models.md#atlas), 438 MFLOP per token for training at d_model 128
// (fwd + recompute + adjoint), so the d_model-128 cell (120 steps x 2048 tokens) is ~45 min at 40 GFLOP/s even at
// 43 % of the GEMM rate (memory is no longer the limit: 395 MB at T = 2048). The ATLAS models' small MQAR runs:
// configs/mqar_learning_atlas.json and tests/test_atlas_muon.cpp.
void register_atlas_families(Registry& r) {
  r.add_mixer(make_mixer_family<DlaArgs, AtlasMixer>(
      "dla", "DLA: deep gated linear attention, residual-MLP memory, Hebbian GD + decay (docs/models.md#dla-swla-and-omeganet)",
      {deep_memory_flops, {"deep test-time memory", "olive"}}, true));
  r.add_mixer(make_mixer_family<SwlaArgs, AtlasMixer>(
      "swla", "SWLA: sliding-window (c = 8) Hebbian deep memory (docs/models.md#dla-swla-and-omeganet)",
      {deep_memory_flops, {"deep test-time memory", "cyan"}}, true));
  r.add_mixer(make_mixer_family<OmegaNetArgs, AtlasMixer>(
      "omeganet", "OmegaNet: Omega rule (window c = 8), polynomial features, residual-MLP memory (docs/models.md#dla-swla-and-omeganet)",
      {deep_memory_flops, {"deep test-time memory", "gold"}},
      true));
  r.add_mixer(make_mixer_family<AtlasArgs, AtlasMixer>(
      "atlas", "ATLAS: Omega rule optimised by Muon (momentum + Newton-Schulz-5), chunk 16 (docs/models.md#atlas)",
      {deep_memory_flops, {"Atlas family", "red"}}, false,
      atlas_quickstart_note("ATLAS")));
  r.add_mixer(make_mixer_family<AtlasPPArgs, AtlasMixer>(
      "atlas_pp", "ATLAS++: ATLAS with the gated-MLP memory (docs/models.md#atlas)",
      {deep_memory_flops, {"Atlas family", "orange"}}, false,
      atlas_quickstart_note("ATLAS++ (ATLAS with a gated-MLP memory)")));
  register_atlas_hybrids(r);
}

}  // namespace mnemo
