// Titans MAC — Memory as a Context (spec models.md §5.6, with its causality fix). Per segment of C tokens:
//   1. h_j = M_{t-1}(q(x_j))  (memory after the previous segment; q = the memory's query path, own conv cache)
//   2. y = Attn over [P | h | S]: query i sees all of P and h_j, S_j for j <= i (segment-relative);
//      RoPE: P at 0..N_p-1, h_j and S_j at N_p + j
//   3. the memory absorbs the segment with k(y), v(y), gates(y) (chunked LMM continuing from M_{t-1}, b | C)
//   4. o_i = W_o( RMSNorm_a(y_i) ⊙ σ(RMSNorm_b(M_i(q(y_i)))) ),  M_i = state after y_1..y_i (dual form)
// Segments are aligned to absolute positions; decoding keeps the current segment's attention keys/values
// ("mac_hk", "mac_hv", "mac_xk", "mac_xv", at most C each), the memory at the segment start ("mac_seg_w*"),
// the LMM core state ("lmm_*", "conv_q", "conv_k", "conv_v"), the q(x) conv cache "conv_qx" and "mac_pos":
// exact incremental decoding, prefill + decode == full forward.
#include <cmath>

#include "runtime/common.h"
#include "runtime/registry.h"
#include "runtime/titans/titans.h"

namespace mnemo {

LmmCoreOptions titans_core_options(const std::string& family, const MixerContext& ctx, int64_t num_heads,
                                   int64_t head_dim, const json& a);  // lmm.cpp

namespace {

struct TitansMacArgs {
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t memory_depth = 2;
  int64_t expansion = 4;
  int64_t chunk_size = 64;
  int64_t n_persistent = 4;
  bool use_momentum = true;
  bool use_decay = true;
  bool use_conv = true;
  int64_t conv_size = 4;
  double alpha_bias = -6.0;
  double eta_bias = 2.0;
  double theta_bias = 0.0;
  double theta_max = 0.1;
  std::string form = "chunk";
  int64_t segment_size = 512;  // C; a multiple of chunk_size
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TitansMacArgs, num_heads, head_dim, memory_depth, expansion,
                                                chunk_size, n_persistent, use_momentum, use_decay, use_conv,
                                                conv_size, alpha_bias, eta_bias, theta_bias, theta_max, form,
                                                segment_size, rope_theta, q_block)

class TitansMacMixer : public Mixer {
 public:
  TitansMacMixer(const MixerContext& ctx, const TitansMacArgs& a) : args_(a), n_p_(a.n_persistent) {
    auto o = titans_core_options("titans_mac", ctx, a.num_heads, a.head_dim, json(a));
    if (a.segment_size < 1 || a.segment_size % a.chunk_size != 0)
      throw Error("titans_mac: segment_size must be a positive multiple of chunk_size " +
                  std::to_string(a.chunk_size) + ", got " + std::to_string(a.segment_size));
    heads_ = ctx.n_heads;
    if (heads_ < 1 || ctx.d_model % heads_ != 0)
      throw Error("titans_mac: d_model " + std::to_string(ctx.d_model) + " is not divisible by n_heads " +
                  std::to_string(heads_));
    dh_ = ctx.d_model / heads_;
    if (o.heads * o.head_dim != ctx.d_model)
      throw Error("titans_mac: memory heads × head_dim must equal d_model " + std::to_string(ctx.d_model) +
                  ", got " + std::to_string(o.heads * o.head_dim));
    core_ = register_module("core", LmmCore(o));
    if (n_p_ > 0) persistent_ = register_parameter("persistent", torch::randn({n_p_, ctx.d_model}) * 0.02);
    q_proj_ = register_module("q_proj", make_linear(ctx.d_model, ctx.d_model));
    k_proj_ = register_module("k_proj", make_linear(ctx.d_model, ctx.d_model));
    v_proj_ = register_module("v_proj", make_linear(ctx.d_model, ctx.d_model));
    norm_a_ = register_module("norm_attn", RMSNorm(ctx.d_model));
    norm_b_ = register_module("norm_mem", RMSNorm(ctx.d_model));
    o_proj_ = register_module("o_proj", make_linear(ctx.d_model, ctx.d_model));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    LayerState local;
    LayerState* st = state ? state : &local;
    const bool detach = state != nullptr;  // the stateless forward back-propagates across segments
    auto keep = [&](const torch::Tensor& t) { return detach ? t.detach() : t; };
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2), C = args_.segment_size;
    const auto dt = x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    int64_t pos = titans_state_int(st, "mac_pos");
    const size_t n_w = core_->spec.num_weights();
    auto io = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
    auto heads = [&](torch::nn::Linear& p, const torch::Tensor& in, int64_t offset, bool rope) {
      auto h = p(in).view({in.size(0), in.size(1), heads_, dh_}).transpose(1, 2);
      return rope ? apply_rope(h, offset, args_.rope_theta) : h;
    };
    torch::Tensor pk, pv;
    if (n_p_ > 0) {
      auto prefix = persistent_.to(x.scalar_type()).unsqueeze(0).expand({B, n_p_, D});
      pk = heads(k_proj_, prefix, 0, true);
      pv = heads(v_proj_, prefix, 0, false);
    }
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < T;) {
      const int64_t so = pos % C, n = std::min(T - i, C - so);
      auto xs = x.narrow(1, i, n);
      if (so == 0) {  // new segment: freeze M_{t-1} for retrieval, drop the previous segment's keys
        auto w = core_->current_weights(st, B, dt);
        for (size_t l = 0; l < n_w; ++l) st->tensors["mac_seg_w" + std::to_string(l)] = keep(w[l]);
        for (const char* key : {"mac_hk", "mac_hv", "mac_xk", "mac_xv"}) st->tensors.erase(key);
      }
      MemoryWeights seg_w;
      for (size_t l = 0; l < n_w; ++l) seg_w.push_back(st->at("mac_seg_w" + std::to_string(l)).to(dt));
      // 1. retrieval with the memory before the segment
      auto qx = core_->query(xs, st, "conv_qx", detach).transpose(1, 2).to(dt);  // [B, H, n, d]
      auto h = memory_apply(core_->spec, seg_w, qx).transpose(1, 2).reshape({B, n, D}).to(x.scalar_type());
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
      std::vector<torch::Tensor> ks = {hk, xk}, vs = {hv, xv};
      auto seg_pos = torch::arange(n_p_, n_p_ + so + n, io);
      std::vector<torch::Tensor> kp = {seg_pos, seg_pos};
      if (n_p_ > 0) {
        ks.insert(ks.begin(), pk);
        vs.insert(vs.begin(), pv);
        kp.insert(kp.begin(), torch::arange(0, n_p_, io));
      }
      auto qpos = torch::arange(n_p_ + so, n_p_ + so + n, io);
      auto y = titans_attention(q, qpos, torch::cat(ks, 2), torch::cat(vs, 2), torch::cat(kp), 0, 0, args_.q_block);
      y = y.transpose(1, 2).reshape({B, n, D});
      // 3.–4. the memory absorbs y (read after write), gated output
      auto m = core_(y, st, detach).reshape({B, n, D});
      outs.push_back(o_proj_(norm_a_(y) * torch::sigmoid(norm_b_(m))));
      pos += n;
      i += n;
    }
    titans_set_state_int(st, "mac_pos", pos);
    return T > 0 ? torch::cat(outs, 1) : x * 0.0;
  }

 private:
  TitansMacArgs args_;
  int64_t n_p_, heads_ = 0, dh_ = 0;
  LmmCore core_{nullptr};
  torch::Tensor persistent_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  RMSNorm norm_a_{nullptr}, norm_b_{nullptr};
};

}  // namespace

void register_titans_mac(Registry& r) {
  r.add_mixer(make_mixer_family<TitansMacArgs, TitansMacMixer>(
      "titans_mac", "Titans MAC: segment attention over [persistent | memory read-out | segment] (models.md §5.6)",
      /*cpu_quickstart=*/false));
}

}  // namespace mnemo
