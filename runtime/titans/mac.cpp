// Titans MAC — Memory as a Context (docs/models.md#titans-mac, with its causality fix). Per segment of C tokens:
//   1. h_j = M_{t-1}(q(x_j))  (memory after the previous segment; q = the memory's query path, own conv cache)
//   2. y = Attn over [P | h | S]: query i sees all of P and h_j, S_j for j <= i (segment-relative);
//      RoPE: P at 0..N_p-1, h_j and S_j at N_p + j
//   3. the memory absorbs the segment with k(y), v(y), gates(y) (chunked LMM continuing from M_{t-1}, b | C)
//   4. o_i = W_o( RMSNorm_a(y_i) ⊙ σ(RMSNorm_b(M_i(q(y_i)))) ),  M_i = state after y_1..y_i (dual form)
// Segments are aligned to absolute positions; decoding keeps the current segment's attention keys/values
// ("mac_hk", "mac_hv", "mac_xk", "mac_xv", at most C each), the memory at the segment start ("mac_seg_w*"),
// the LMM core state ("lmm_*", "conv_q", "conv_k", "conv_v"), the q(x) conv cache "conv_qx" and "mac_pos":
// exact incremental decoding, prefill + decode == full forward. The segment logic is MacMixerBase
// (hybrid_block.cpp, shared with atlas_mac); this file supplies the LMM memory branch.
#include <cmath>

#include "core/common.h"
#include "runtime/registry.h"
#include "runtime/blocks/hybrid_block.h"
#include "runtime/titans/titans.h"

namespace mnemo {

LmmCoreOptions titans_core_options(const std::string& family, const MixerContext& ctx, int64_t num_heads,
                                   int64_t head_dim, const json& a);  // lmm.cpp

namespace {

struct TitansMacArgs : TitansLmmArgs {
  int64_t segment_size = 512;  // C; a multiple of chunk_size
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TitansMacArgs, TITANS_LMM_ARG_NAMES, segment_size, rope_theta, q_block)

class TitansMacMixer : public MacMixerBase {
 public:
  TitansMacMixer(const MixerContext& ctx, const TitansMacArgs& a) {
    auto o = titans_core_options("titans_mac", ctx, a.num_heads, a.head_dim, json(a));
    HybridAttnOptions h;
    h.family = "titans_mac";
    h.n_persistent = a.n_persistent;
    h.memory_width = o.heads * o.head_dim;
    h.rope_theta = a.rope_theta;
    h.q_block = a.q_block;
    h.segment_size = a.segment_size;
    h.chunk_size = a.chunk_size;
    check_mac(ctx, h);
    core_ = register_module("core", LmmCore(o));
    build(ctx);
  }

 protected:
  size_t memory_num_weights() const override { return core_->spec.num_weights(); }
  MemoryWeights memory_weights(LayerState* st, int64_t batch, torch::ScalarType dt) override {
    return core_->current_weights(st, batch, dt);
  }
  torch::Tensor memory_read(const MemoryWeights& w, const torch::Tensor& x, LayerState* st,
                            const std::string& cache_key, bool detach) override {
    const int64_t B = x.size(0), n = x.size(1);
    auto qx = core_->query(x, st, cache_key, detach).transpose(1, 2).to(w[0].scalar_type());  // [B, H, n, d]
    return memory_apply(core_->spec, w, qx).transpose(1, 2).reshape({B, n, x.size(2)}).to(x.scalar_type());
  }
  torch::Tensor memory_absorb(const torch::Tensor& y, LayerState* st, bool detach) override {
    return core_(y, st, detach).reshape({y.size(0), y.size(1), y.size(2)});
  }

 private:
  LmmCore core_{nullptr};
};

}  // namespace

void register_titans_mac(Registry& r) {
  r.add_mixer(make_mixer_family<TitansMacArgs, TitansMacMixer>(
      "titans_mac", "Titans MAC: segment attention over [persistent | memory read-out | segment] (docs/models.md#titans-mac)",
      {sum_of(attention_flops, deep_memory_flops), {"deep test-time memory", "purple"}},
      /*cpu_quickstart=*/true));  // d64 quickstart cell: 38 s (1 thread)
}

}  // namespace mnemo
