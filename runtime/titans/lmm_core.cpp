// The Titans LMM core module (docs/models.md#titans), shared by the titans_lmm, titans_mag and titans_mac
// mixers: q/k/v paths (Conv4 + SiLU, l2-normalised q, k), the gates α, η, θ, the learned initial memory,
// and the call into the chunk-wise / token-by-token LMM kernel (runtime/titans/chunk.cpp, naive.cpp).
#include <cmath>

#include "core/common.h"
#include "runtime/blocks/state_int.h"
#include "runtime/kernels/precision.h"
#include "runtime/titans/titans.h"

namespace mnemo {

LmmCoreImpl::LmmCoreImpl(const LmmCoreOptions& o) : opt(o) {
  const std::string who = "titans";
  if (o.memory_depth != 1 && o.memory_depth != 2)
    throw Error(who + ": memory_depth must be 1 (linear) or 2 (residual MLP), got " + std::to_string(o.memory_depth));
  if (o.chunk_size < 1) throw Error(who + ": chunk_size must be >= 1, got " + std::to_string(o.chunk_size));
  if (o.conv_size < 1) throw Error(who + ": conv_size must be >= 1, got " + std::to_string(o.conv_size));
  if (!(o.theta_max > 0)) throw Error(who + ": theta_max must be > 0, got " + std::to_string(o.theta_max));
  if (!(o.inner_grad_clip >= 0))
    throw Error(who + ": inner_grad_clip must be >= 0 (0 = off), got " + std::to_string(o.inner_grad_clip));
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

std::vector<std::string> LmmCoreImpl::no_weight_decay() const {
  std::vector<std::string> names;
  for (size_t l = 0; l < init_weights.size(); ++l) names.push_back("memory_init_" + std::to_string(l));
  return names;
}

MemoryWeights LmmCoreImpl::current_weights(LayerState* state, int64_t batch, torch::ScalarType dt) {
  return current_memory_weights(init_weights, opt.key, state, batch, dt);
}

torch::Tensor LmmCoreImpl::query(const torch::Tensor& x, LayerState* state, const std::string& cache_key,
                                 bool detach) {
  return q_proj->forward_keyed(x, state, cache_key, detach);
}

torch::Tensor LmmCoreImpl::forward(const torch::Tensor& x, LayerState* state, bool detach) {
  const int64_t B = x.size(0), T = x.size(1), H = opt.heads;
  auto q = q_proj->forward_keyed(x, state, "conv_q", detach);  // [B, T, H, d]
  auto k = k_proj->forward_keyed(x, state, "conv_k", detach);
  auto v = v_proj->forward_keyed(x, state, "conv_v", detach);
  const auto dt = recurrence_dtype(x);
  auto z = gate_proj(x).to(dt).view({B, T, 3, H});
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: projections above under autocast, the memory below in fp32
  auto log_keep = opt.use_decay ? torch::log_sigmoid(-z.select(2, 0)) : torch::Tensor();  // log(1 - α)
  auto log_eta = opt.use_momentum ? torch::log_sigmoid(z.select(2, 1)) : torch::Tensor();  // log η
  auto theta = opt.theta_max * torch::sigmoid(z.select(2, 2));

  TitansMemoryState init;
  init.w = current_weights(state, B, dt);
  const std::string offset_key = opt.key + "_offset";
  // Inside a static decode step (runtime/mixer.h) the offset in the chunk stays a tensor: no read back to the host.
  const bool fixed_shapes = state && T == 1 && static_decode_active() && state->has(offset_key);
  if (state && state->has(offset_key)) {
    if (!fixed_shapes) init.offset = state_int(state, offset_key);
    for (size_t l = 0; l < init.w.size(); ++l) {
      const std::string s = opt.key + "_s" + std::to_string(l), a = opt.key + "_a" + std::to_string(l);
      if (state->has(s)) init.s.push_back(state->at(s));
      if (state->has(a)) init.anchor.push_back(state->at(a));
    }
  }
  const bool recurrent = opt.recurrent || (state != nullptr && T == 1);
  const double clip = opt.inner_grad_clip;
  torch::Tensor next_offset;
  auto r = fixed_shapes ? titans_lmm_static_step(spec, q, k, v, log_keep, log_eta, theta, init,
                                                 state->at(offset_key), next_offset, opt.chunk_size, clip)
           : recurrent  ? titans_lmm_recurrent(spec, q, k, v, log_keep, log_eta, theta, init, opt.chunk_size, clip)
                        : titans_lmm_chunk(spec, q, k, v, log_keep, log_eta, theta, init, opt.chunk_size, clip);
  if (state) {
    for (size_t l = 0; l < r.state.w.size(); ++l) {
      const auto i = std::to_string(l);
      auto keep = [&](const torch::Tensor& t) { return detach ? t.detach() : t; };
      state->tensors[opt.key + "_w" + i] = keep(r.state.w[l]);
      state->tensors[opt.key + "_a" + i] = keep(r.state.anchor[l]);
      if (!r.state.s.empty()) state->tensors[opt.key + "_s" + i] = keep(r.state.s[l]);
    }
    if (fixed_shapes)
      state->tensors[offset_key] = next_offset;
    else
      set_state_int(state, offset_key, r.state.offset);
  }
  return r.y.to(x.scalar_type());
}

}  // namespace mnemo
