// Titans MAG — Memory as a Gate (docs/models.md#titans-mag):
//   x̃ = [p_1 … p_{N_p}] || x ;  y = SW-Attn*(x̃) (window W, prefix always visible) ;  m = LMM(x̃)
//   o = W_o( RMSNorm_a(y) ⊙ σ(RMSNorm_b(m)) ), prefix positions dropped.
// Attention: RoPE with the prefix at positions 0..N_p-1 and token t at N_p + t; queries only for the
// real tokens (the prefix outputs are dropped). Decode state: the LMM core state ("lmm_*", "conv_*"),
// "mag_pk"/"mag_pv" (prefix keys/values), "mag_wk"/"mag_wv" (the last ≤ W keys/values), "mag_pos".
// The block is MagMixerBase (hybrid_block.cpp, shared with atlas_mag); this file supplies the LMM memory branch.
#include <cmath>

#include "core/common.h"
#include "runtime/registry.h"
#include "runtime/blocks/hybrid_block.h"
#include "runtime/titans/titans.h"

namespace mnemo {

LmmCoreOptions titans_core_options(const std::string& family, const MixerContext& ctx, int64_t num_heads,
                                   int64_t head_dim, const json& a);  // lmm.cpp

namespace {

struct TitansMagArgs : TitansLmmArgs {
  int64_t window = 2048;  // SWA window W (keys (t-W, t], plus the prefix)
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TitansMagArgs, TITANS_LMM_ARG_NAMES, window, rope_theta, q_block)

class TitansMagMixer : public MagMixerBase {
 public:
  TitansMagMixer(const MixerContext& ctx, const TitansMagArgs& a) {
    auto o = titans_core_options("titans_mag", ctx, a.num_heads, a.head_dim, json(a));
    HybridAttnOptions h;
    h.family = "titans_mag";
    h.n_persistent = a.n_persistent;
    h.memory_width = o.heads * o.head_dim;
    h.rope_theta = a.rope_theta;
    h.q_block = a.q_block;
    h.window = a.window;
    check_mag(ctx, h);
    core_ = register_module("core", LmmCore(o));
    build(ctx);
  }

 protected:
  bool memory_fresh(LayerState* st) const override { return !st->has("lmm_offset"); }
  torch::Tensor memory_branch(const torch::Tensor& x, LayerState* st) override {
    return core_(x, st).reshape({x.size(0), x.size(1), x.size(2)});
  }

 private:
  LmmCore core_{nullptr};
};

}  // namespace

void register_titans_mag(Registry& r) {
  r.add_mixer(make_mixer_family<TitansMagArgs, TitansMagMixer>(
      "titans_mag", "Titans MAG: SWA (prefix always visible) gated by the LMM branch (docs/models.md#titans-mag)",
      {sum_of(attention_flops, deep_memory_flops), {"deep test-time memory", "green"}},
      /*cpu_quickstart=*/true));  // d64 quickstart cell: 30 s (1 thread)
}

}  // namespace mnemo
