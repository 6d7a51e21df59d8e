// Titans hybrid blocks MAC (docs/models.md#titans-mac) and MAG (docs/models.md#titans-mag) over an abstract memory branch (hybrid_block.h);
// used by titans_mac / titans_mag (runtime/titans) and atlas_mac / atlas_mag (runtime/atlas, §7.9).
#include "runtime/blocks/hybrid_block.h"

#include "core/common.h"
#include "runtime/blocks/window_attention.h"
#include "runtime/blocks/state_int.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

// ---------------------------------------------------------------------------------------------
// Shared parts

void HybridAttnMixer::check_layout(const MixerContext& ctx, const HybridAttnOptions& o) {
  const auto& f = o.family;
  if (o.n_persistent < 0) throw Error(f + ": n_persistent must be >= 0, got " + std::to_string(o.n_persistent));
  if (ctx.n_heads < 1 || ctx.d_model % ctx.n_heads != 0)
    throw Error(f + ": d_model " + std::to_string(ctx.d_model) + " is not divisible by n_heads " +
                std::to_string(ctx.n_heads));
  if (o.memory_width != ctx.d_model)
    throw Error(f + ": memory heads × head_dim must equal d_model " + std::to_string(ctx.d_model) +
                " (the two branches are combined element-wise), got " + std::to_string(o.memory_width));
  hopt_ = o;
  n_p_ = o.n_persistent;
  heads_ = ctx.n_heads;
  dh_ = ctx.d_model / heads_;
}

void HybridAttnMixer::build(const MixerContext& ctx) {
  if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
  q_proj_ = register_module("q_proj", make_linear(ctx.d_model, ctx.d_model));
  k_proj_ = register_module("k_proj", make_linear(ctx.d_model, ctx.d_model));
  v_proj_ = register_module("v_proj", make_linear(ctx.d_model, ctx.d_model));
  norm_a_ = register_module("norm_attn", RMSNorm(ctx.d_model));
  norm_b_ = register_module("norm_mem", RMSNorm(ctx.d_model));
  o_proj_ = register_module("o_proj", make_linear(ctx.d_model, ctx.d_model));
}

torch::Tensor HybridAttnMixer::heads(torch::nn::Linear& p, const torch::Tensor& in, int64_t offset, bool rope) {
  auto h = p(in).view({in.size(0), in.size(1), heads_, dh_}).transpose(1, 2);
  return rope ? apply_rope(h, offset, hopt_.rope_theta) : h;
}

torch::Tensor HybridAttnMixer::persistent_prefix(int64_t batch, torch::ScalarType dt) {
  return persistent_.to(dt).unsqueeze(0).expand({batch, n_p_, persistent_.size(1)});
}

torch::Tensor HybridAttnMixer::combine(const torch::Tensor& y, const torch::Tensor& m) {
  return o_proj_(norm_a_(y) * torch::sigmoid(norm_b_(m)));
}

// ---------------------------------------------------------------------------------------------
// MAC (docs/models.md#titans-mac)

void MacMixerBase::check_mac(const MixerContext& ctx, const HybridAttnOptions& o) {
  if (o.segment_size < 1 || o.chunk_size < 1 || o.segment_size % o.chunk_size != 0)
    throw Error(o.family + ": segment_size must be a positive multiple of chunk_size " +
                std::to_string(o.chunk_size) + ", got " + std::to_string(o.segment_size));
  check_layout(ctx, o);
}

torch::Tensor MacMixerBase::forward(const torch::Tensor& x, LayerState* state) {
  LayerState local;
  LayerState* st = state ? state : &local;
  const bool detach = state != nullptr;  // the stateless forward back-propagates across segments
  auto keep = [&](const torch::Tensor& t) { return detach ? t.detach() : t; };
  const int64_t B = x.size(0), T = x.size(1), C = hopt_.segment_size;
  const auto dt = recurrence_dtype(x);
  int64_t pos = state_int(st, "mac_pos");
  const size_t n_w = memory_num_weights();
  torch::Tensor pk, pv;
  if (n_p_ > 0) {
    auto prefix = persistent_prefix(B, x.scalar_type());
    pk = heads(k_proj_, prefix, 0, true);
    pv = heads(v_proj_, prefix, 0, false);
  }
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < T;) {
    const int64_t so = pos % C, n = std::min(T - i, C - so);
    auto xs = x.narrow(1, i, n);
    if (so == 0) {  // new segment: freeze M_{t-1} for retrieval, drop the previous segment's keys
      auto w = memory_weights(st, B, dt);
      for (size_t l = 0; l < n_w; ++l) st->tensors["mac_seg_w" + std::to_string(l)] = keep(w[l]);
      for (const char* key : {"mac_hk", "mac_hv", "mac_xk", "mac_xv"}) st->tensors.erase(key);
    }
    MemoryWeights seg_w;
    for (size_t l = 0; l < n_w; ++l) seg_w.push_back(st->at("mac_seg_w" + std::to_string(l)).to(dt));
    // 1. retrieval with the memory before the segment
    auto h = memory_read(seg_w, xs, st, "conv_qx", detach);
    // 2. attention over [P | h | S]
    auto q = heads(q_proj_, xs, n_p_ + so, true);
    auto hk = heads(k_proj_, h, n_p_ + so, true), hv = heads(v_proj_, h, n_p_ + so, false);
    auto xk = heads(k_proj_, xs, n_p_ + so, true), xv = heads(v_proj_, xs, n_p_ + so, false);
    auto grow = [&](const char* key, const torch::Tensor& t) {
      auto all = st->has(key) ? torch::cat({st->at(key).to(t.scalar_type()), t}, 2) : t;
      if (so + n < C) st->tensors[key] = keep(all);
      else st->tensors.erase(key);
      return all;
    };
    hk = grow("mac_hk", hk);
    hv = grow("mac_hv", hv);
    xk = grow("mac_xk", xk);
    xv = grow("mac_xv", xv);
    auto y = segment_attention(q, so, pk, pv, hk, hv, xk, xv, hopt_.q_block);
    y = y.transpose(1, 2).reshape({B, n, x.size(2)});
    // 3.–4. the memory absorbs y (read after write), gated output
    outs.push_back(combine(y, memory_absorb(y, st, detach)));
    pos += n;
    i += n;
  }
  set_state_int(st, "mac_pos", pos);
  return T > 0 ? torch::cat(outs, 1) : x * 0.0;
}

// ---------------------------------------------------------------------------------------------
// MAG (docs/models.md#titans-mag)

void MagMixerBase::check_mag(const MixerContext& ctx, const HybridAttnOptions& o) {
  if (o.window < 1) throw Error(o.family + ": window must be >= 1, got " + std::to_string(o.window));
  check_layout(ctx, o);
}

torch::Tensor MagMixerBase::forward(const torch::Tensor& x, LayerState* state) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  const bool fresh = state == nullptr || memory_fresh(state);
  const int64_t pos = fresh ? 0 : state_int(state, "mag_pos");
  torch::Tensor prefix;
  if (n_p_ > 0) prefix = persistent_prefix(B, x.scalar_type());

  // Memory branch over x̃ (the prefix is absorbed on the first call only).
  auto xt = (fresh && n_p_ > 0) ? torch::cat({prefix, x}, 1) : x;
  auto m = memory_branch(xt, state);
  if (fresh && n_p_ > 0) m = m.narrow(1, n_p_, T);

  // Attention branch.
  auto q = heads(q_proj_, x, n_p_ + pos, true), k = heads(k_proj_, x, n_p_ + pos, true);
  auto v = heads(v_proj_, x, n_p_ + pos, false);
  torch::Tensor pk, pv;
  if (!fresh && state->has("mag_pk")) {
    pk = state->at("mag_pk").to(x.scalar_type());
    pv = state->at("mag_pv").to(x.scalar_type());
  } else {
    pk = n_p_ > 0 ? heads(k_proj_, prefix, 0, true) : k.narrow(2, 0, 0);
    pv = n_p_ > 0 ? heads(v_proj_, prefix, 0, false) : v.narrow(2, 0, 0);
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
  auto y = window_attention(q, qpos, keys, vals, kpos, hopt_.window, n_p_, hopt_.q_block);
  y = y.transpose(1, 2).reshape({B, T, D});

  if (state) {
    auto wk = torch::cat({ck, k}, 2), wv = torch::cat({cv, v}, 2);
    const int64_t keep = std::min<int64_t>(wk.size(2), hopt_.window);
    state->tensors["mag_wk"] = wk.narrow(2, wk.size(2) - keep, keep).detach().clone();
    state->tensors["mag_wv"] = wv.narrow(2, wv.size(2) - keep, keep).detach().clone();
    state->tensors["mag_pk"] = pk.detach();
    state->tensors["mag_pv"] = pv.detach();
    set_state_int(state, "mag_pos", pos + T);
  }
  return combine(y, m);
}

}  // namespace mnemo
