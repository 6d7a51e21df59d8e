// Titans LMM core module, the `titans_lmm` mixer (spec models.md §5.4) and the family registration
// (titans_lmm, titans_mag, titans_mac, model titans_mal).
//   x̃ = [p_1 … p_{N_p}] || RMSNorm(h)        (persistent tokens, first call of a request only)
//   y = LMM(q, k, v; α, η, θ)                  (chunk b, anchor gradients, momentum, decay)
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) ), prefix positions dropped
// Decode state: "lmm_w*", "lmm_s*", "lmm_a*" (memory, momentum, anchor), "lmm_offset" (position in chunk),
// conv caches "conv_q", "conv_k", "conv_v". Prefill + decode == full forward (same absolute chunk alignment).
#include <cmath>
#include <limits>

#include "runtime/common.h"
#include "runtime/registry.h"
#include "runtime/titans/titans.h"

namespace mnemo {

int64_t titans_state_int(LayerState* state, const std::string& key) {
  if (!state || !state->has(key)) return 0;
  return state->at(key).item<int64_t>();
}

void titans_set_state_int(LayerState* state, const std::string& key, int64_t value) {
  if (state) state->tensors[key] = torch::tensor(value, torch::kInt64);
}

LmmCoreImpl::LmmCoreImpl(const LmmCoreOptions& o) : opt(o) {
  const std::string who = "titans";
  if (o.memory_depth != 1 && o.memory_depth != 2)
    throw Error(who + ": memory_depth must be 1 (linear) or 2 (residual MLP), got " + std::to_string(o.memory_depth));
  if (o.chunk_size < 1) throw Error(who + ": chunk_size must be >= 1, got " + std::to_string(o.chunk_size));
  if (o.conv_size < 1) throw Error(who + ": conv_size must be >= 1, got " + std::to_string(o.conv_size));
  if (!(o.theta_max > 0)) throw Error(who + ": theta_max must be > 0, got " + std::to_string(o.theta_max));
  spec.kind = o.memory_depth == 1 ? MemoryKind::Linear : MemoryKind::ResidualMLP;
  spec.d_in = spec.d_out = o.head_dim;
  spec.expansion = o.expansion;
  spec.validate(who);
  auto proj = [&](bool l2, const std::string& name) {
    HeadProjectionOptions p;
    p.d_model = o.d_in_model;
    p.n_heads = o.heads;
    p.head_dim = o.head_dim;
    p.short_conv = o.use_conv;
    p.conv_size = o.conv_size;
    p.silu = true;
    p.l2_normalize = l2;
    return register_module(name + "_proj", HeadProjection(p, name));
  };
  q_proj = proj(true, "q");
  k_proj = proj(true, "k");
  v_proj = proj(false, "v");
  gate_proj = register_module("gate_proj", make_linear(o.d_in_model, 3 * o.heads, /*bias=*/true));
  {
    torch::NoGradGuard no_grad;
    auto b = gate_proj->bias.view({3, o.heads});
    b[0].fill_(o.alpha_bias);
    b[1].fill_(o.eta_bias);
    b[2].fill_(o.theta_bias);
  }
  auto w0 = init_memory_weights(spec, o.heads);
  for (size_t l = 0; l < w0.size(); ++l)
    init_weights.push_back(register_parameter("memory_init_" + std::to_string(l), w0[l]));
}

MemoryWeights LmmCoreImpl::current_weights(LayerState* state, int64_t batch, torch::ScalarType dt) {
  MemoryWeights w;
  for (size_t l = 0; l < init_weights.size(); ++l) {
    const std::string key = opt.key + "_w" + std::to_string(l);
    if (state && state->has(key)) {
      w.push_back(state->at(key).to(dt));
    } else {
      const auto& p = init_weights[l];
      w.push_back(p.to(dt).unsqueeze(0).expand({batch, p.size(0), p.size(1), p.size(2)}));
    }
  }
  return w;
}

// proj -> causal depthwise conv (cache `key`, kept differentiable unless `detach`) -> SiLU -> heads -> l2norm.
torch::Tensor LmmCoreImpl::path(HeadProjection& p, const torch::Tensor& x, LayerState* state, const std::string& key,
                                bool l2, bool detach) {
  const int64_t B = x.size(0), T = x.size(1);
  auto y = p->proj(x);
  if (opt.use_conv) {
    const int64_t K = opt.conv_size, C = y.size(2);
    torch::Tensor prev;
    if (state && state->has(key)) prev = state->at(key).to(y.scalar_type());
    else prev = torch::zeros({B, C, K - 1}, y.options());
    auto full = torch::cat({prev, y.transpose(1, 2)}, 2);
    auto w = p->conv->weight.to(y.scalar_type());
    y = torch::conv1d(full, w, torch::Tensor(), torch::IntArrayRef({1}), torch::IntArrayRef({0}),
                      torch::IntArrayRef({1}), C)
            .transpose(1, 2);
    if (state) {
      auto tail = full.slice(2, T, T + K - 1);
      state->tensors[key] = detach ? tail.detach().clone() : tail;
    }
  }
  y = torch::silu(y).view({B, T, opt.heads, opt.head_dim});
  return l2 ? l2norm(y) : y;
}

torch::Tensor LmmCoreImpl::query(const torch::Tensor& x, LayerState* state, const std::string& cache_key,
                                 bool detach) {
  return path(q_proj, x, state, cache_key, true, detach);
}

torch::Tensor LmmCoreImpl::forward(const torch::Tensor& x, LayerState* state, bool detach) {
  const int64_t B = x.size(0), T = x.size(1), H = opt.heads;
  auto q = path(q_proj, x, state, "conv_q", true, detach);  // [B, T, H, d]
  auto k = path(k_proj, x, state, "conv_k", true, detach);
  auto v = path(v_proj, x, state, "conv_v", false, detach);
  const auto dt = x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto z = gate_proj(x).to(dt).view({B, T, 3, H});
  auto log_keep = opt.use_decay ? torch::log_sigmoid(-z.select(2, 0)) : torch::Tensor();  // log(1 - α)
  auto log_eta = opt.use_momentum ? torch::log_sigmoid(z.select(2, 1)) : torch::Tensor();  // log η
  auto theta = opt.theta_max * torch::sigmoid(z.select(2, 2));

  TitansMemoryState init;
  init.w = current_weights(state, B, dt);
  if (state && state->has(opt.key + "_offset")) {
    init.offset = titans_state_int(state, opt.key + "_offset");
    for (size_t l = 0; l < init.w.size(); ++l) {
      const std::string s = opt.key + "_s" + std::to_string(l), a = opt.key + "_a" + std::to_string(l);
      if (state->has(s)) init.s.push_back(state->at(s));
      if (state->has(a)) init.anchor.push_back(state->at(a));
    }
  }
  const bool recurrent = opt.recurrent || (state != nullptr && T == 1);
  auto r = recurrent ? titans_lmm_recurrent(spec, q, k, v, log_keep, log_eta, theta, init, opt.chunk_size)
                     : titans_lmm_chunk(spec, q, k, v, log_keep, log_eta, theta, init, opt.chunk_size);
  if (state) {
    for (size_t l = 0; l < r.state.w.size(); ++l) {
      const auto i = std::to_string(l);
      auto keep = [&](const torch::Tensor& t) { return detach ? t.detach() : t; };
      state->tensors[opt.key + "_w" + i] = keep(r.state.w[l]);
      state->tensors[opt.key + "_a" + i] = keep(r.state.anchor[l]);
      if (!r.state.s.empty()) state->tensors[opt.key + "_s" + i] = keep(r.state.s[l]);
    }
    titans_set_state_int(state, opt.key + "_offset", r.state.offset);
  }
  return r.y.to(x.scalar_type());
}

torch::Tensor titans_attention(const torch::Tensor& q, const torch::Tensor& qpos, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& kpos, int64_t window,
                               int64_t always_before, int64_t q_block) {
  const int64_t Tq = q.size(2), D = q.size(3);
  const auto dt = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto kc = k.to(dt), vc = v.to(dt);
  const int64_t n_pre = window > 0 ? (kpos < always_before).sum().item<int64_t>() : 0;
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < Tq; s += std::max<int64_t>(1, q_block)) {
    const int64_t e = std::min(Tq, s + std::max<int64_t>(1, q_block));
    auto qb = q.narrow(2, s, e - s).to(dt);
    auto qp = qpos.narrow(0, s, e - s);
    auto kb = kc, vb = vc, kp = kpos;
    if (window > 0) {  // kpos ascending: the always-visible prefix plus the keys in (min q - W, max q]
      const int64_t qlo = qp.min().item<int64_t>(), qhi = qp.max().item<int64_t>();
      const int64_t lo = std::max(n_pre, (kpos <= qlo - window).sum().item<int64_t>());
      const int64_t hi = std::max(lo, (kpos <= qhi).sum().item<int64_t>());
      auto idx = torch::cat({torch::arange(0, n_pre, torch::kInt64), torch::arange(lo, hi, torch::kInt64)})
                     .to(kpos.device());
      kb = kc.index_select(2, idx);
      vb = vc.index_select(2, idx);
      kp = kpos.index_select(0, idx);
    }
    auto qcol = qp.unsqueeze(1), krow = kp.unsqueeze(0);
    auto vis = krow <= qcol;
    if (window > 0) vis = vis & ((krow > qcol - window) | (krow < always_before));
    auto logits = torch::matmul(qb, kb.transpose(-1, -2)) * scale;
    logits = logits.masked_fill(vis.logical_not(), -std::numeric_limits<double>::infinity());
    outs.push_back(torch::matmul(torch::softmax(logits, -1), vb));
  }
  auto out = Tq > 0 ? torch::cat(outs, 2) : torch::zeros({q.size(0), q.size(1), 0, v.size(3)}, q.options());
  return out.to(q.scalar_type());
}

// ---------------------------------------------------------------------------------------------
// titans_lmm mixer

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
  const std::string form = a.at("form").get<std::string>();
  if (form != "chunk" && form != "recurrent")
    throw Error(family + ": form must be \"chunk\" or \"recurrent\", got \"" + form + "\"");
  o.recurrent = form == "recurrent";
  const int64_t np = a.at("n_persistent").get<int64_t>();
  if (np < 0) throw Error(family + ": n_persistent must be >= 0, got " + std::to_string(np));
  return o;
}

class TitansLmmMixer : public Mixer {
 public:
  TitansLmmMixer(const MixerContext& ctx, const TitansLmmArgs& a) : n_p_(a.n_persistent) {
    auto o = titans_core_options("titans_lmm", ctx, a.num_heads, a.head_dim, json(a));
    core_ = register_module("core", LmmCore(o));
    if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
    output_ = register_module("output", GatedOutput(ctx.d_model, o.heads, o.head_dim));
  }

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
      "titans_lmm", "Titans LMM: deep neural memory with momentum and decay, chunk-wise dual form (models.md §5.4)"));
  register_titans_mag(r);
  register_titans_mac(r);
  ModelFamily mal;
  mal.name = "titans_mal";
  mal.description = "Titans MAL: alternating titans_lmm and swa layers (models.md §5.8)";
  mal.layer_pattern = {"titans_lmm", "swa"};
  mal.overrides = json::object();
  mal.cpu_quickstart = true;  // d64 quickstart cell: 17 s (1 thread)
  r.add_model(mal);
}

}  // namespace mnemo
