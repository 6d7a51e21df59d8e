// Atlas hybrids (docs/models.md#atlas-hybrids): "we follow Titans and use two hybrid variants of MAL and MAG", with the
// ATLAS memory (Omega rule + Muon, atlas_core.h) in place of the Titans LMM; N_p = 4, SWA window 2048 [decision];
// BABILong uses MAC "without persistent memory tokens" (atlas_mac with n_persistent = 0).
//   atlas_mag (§5.7): x̃ = [p_1 … p_{N_p}] || x ;  y = SW-Attn*(x̃) ;  m = ATLAS(x̃) ;
//     o = W_o( RMSNorm_a(y) ⊙ σ(RMSNorm_b(m)) ), prefix positions dropped        (MagMixerBase)
//   atlas_mac (§5.6): per segment of C tokens, h = M_{t-1}(φ(q(x))), attention over [P | h | S], the ATLAS memory
//     absorbs y, o_i = W_o( RMSNorm_a(y_i) ⊙ σ(RMSNorm_b(M_i(φ(q(y_i))))) )       (MacMixerBase)
//   atlas_mal (§5.8): alternating atlas and swa layers; the model overrides n_persistent = 4 for the atlas layers.
// The block logic is shared with titans_mag / titans_mac (runtime/titans/hybrid_block.{h,cpp}). Decode state: the
// core state ("atlas_*", "conv_q", "conv_k", "conv_v") plus the block's ("mag_*" | "mac_*", "conv_qx").
#include "runtime/atlas/atlas_core.h"
#include "runtime/registry.h"
#include "runtime/blocks/hybrid_block.h"

namespace mnemo {

namespace {

struct AtlasMagArgs {
  ATLAS_GD_FIELDS(16, 8, "mlp", "l2", 5.0, 0.02, true)
  ATLAS_MUON_FIELDS
  int64_t n_persistent = 4;  // N_p (docs/models.md#titans, docs/models.md#atlas-hybrids)
  int64_t window = 2048;     // SWA window W (keys (t-W, t], plus the prefix)
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AtlasMagArgs, ATLAS_GD_NAMES, ATLAS_MUON_NAMES, n_persistent,
                                                window, rope_theta, q_block)

struct AtlasMacArgs {
  ATLAS_GD_FIELDS(16, 8, "mlp", "l2", 5.0, 0.02, true)
  ATLAS_MUON_FIELDS
  int64_t n_persistent = 4;    // N_p (docs/models.md#titans-mac default; 0 for the BABILong variant, §7.9)
  int64_t segment_size = 512;  // C; a multiple of chunk_size
  double rope_theta = 10000.0;
  int64_t q_block = 256;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AtlasMacArgs, ATLAS_GD_NAMES, ATLAS_MUON_NAMES, n_persistent,
                                                segment_size, rope_theta, q_block)

template <class Args>
HybridAttnOptions hybrid_options(const std::string& family, const AtlasCoreOptions& o, const Args& a) {
  HybridAttnOptions h;
  h.family = family;
  h.n_persistent = a.n_persistent;
  h.memory_width = o.heads * o.head_dim;
  h.rope_theta = a.rope_theta;
  h.q_block = a.q_block;
  h.chunk_size = a.chunk_size;
  return h;
}

class AtlasMagMixer : public MagMixerBase {
 public:
  AtlasMagMixer(const MixerContext& ctx, const AtlasMagArgs& a) {
    auto o = atlas_core_options("atlas_mag", ctx, json(a), true);
    auto h = hybrid_options("atlas_mag", o, a);
    h.window = a.window;
    check_mag(ctx, h);
    core_ = register_module("core", AtlasCore(o));
    build(ctx);
  }

 protected:
  bool memory_fresh(LayerState* st) const override { return !st->has(core_->opt.key + "_offset"); }
  torch::Tensor memory_branch(const torch::Tensor& x, LayerState* st) override {
    return core_(x, st).to(x.scalar_type()).reshape({x.size(0), x.size(1), x.size(2)});
  }

 private:
  AtlasCore core_{nullptr};
};

class AtlasMacMixer : public MacMixerBase {
 public:
  AtlasMacMixer(const MixerContext& ctx, const AtlasMacArgs& a) {
    auto o = atlas_core_options("atlas_mac", ctx, json(a), true);
    auto h = hybrid_options("atlas_mac", o, a);
    h.segment_size = a.segment_size;
    check_mac(ctx, h);
    core_ = register_module("core", AtlasCore(o));
    build(ctx);
  }

 protected:
  size_t memory_num_weights() const override { return core_->init_weights.size(); }
  MemoryWeights memory_weights(LayerState* st, int64_t batch, torch::ScalarType dt) override {
    return core_->current_weights(st, batch, dt);
  }
  torch::Tensor memory_read(const MemoryWeights& w, const torch::Tensor& x, LayerState* st,
                            const std::string& cache_key, bool detach) override {
    return core_->read(w, x, st, cache_key, detach).reshape({x.size(0), x.size(1), x.size(2)}).to(x.scalar_type());
  }
  torch::Tensor memory_absorb(const torch::Tensor& y, LayerState* st, bool detach) override {
    return core_(y, st, detach).to(y.scalar_type()).reshape({y.size(0), y.size(1), y.size(2)});
  }

 private:
  AtlasCore core_{nullptr};
};

}  // namespace

void register_atlas_hybrids(Registry& r) {
  r.add_mixer(make_mixer_family<AtlasMagArgs, AtlasMagMixer>(
      "atlas_mag", "ATLAS MAG: SWA (prefix always visible) gated by the ATLAS memory branch (docs/models.md#atlas-hybrids, docs/models.md#titans-mag)",
      {sum_of(attention_flops, deep_memory_flops), {"Atlas family", "green"}},
      /*cpu_quickstart=*/false, atlas_quickstart_note("ATLAS MAG's memory branch")));
  r.add_mixer(make_mixer_family<AtlasMacArgs, AtlasMacMixer>(
      "atlas_mac",
      "ATLAS MAC: segment attention over [persistent | ATLAS memory read-out | segment] (docs/models.md#atlas-hybrids, docs/models.md#titans-mac)",
      {sum_of(attention_flops, deep_memory_flops), {"Atlas family", "purple"}},
      /*cpu_quickstart=*/false, atlas_quickstart_note("ATLAS MAC's memory read-out")));
  ModelFamily mal;
  mal.name = "atlas_mal";
  mal.description = "ATLAS MAL: alternating atlas and swa layers, N_p = 4 on the atlas layers (docs/models.md#atlas-hybrids, docs/models.md#titans-mal)";
  mal.layer_pattern = {"atlas", "swa"};
  mal.overrides = {{"n_persistent", 4}};
  mal.style = {"Atlas family", "brown"};
  mal.cpu_quickstart = false;
  mal.quickstart_note = atlas_quickstart_note("every other layer of ATLAS MAL");
  r.add_model(mal);
}

}  // namespace mnemo
