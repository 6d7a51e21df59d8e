// Atlas-family memory core (docs/models.md#atlas-family, docs/models.md#dla-swla-and-omeganet, docs/models.md#atlas, docs/models.md#atlas-hybrids): the docs/models.md#shared-building-blocks template projections with the feature map φ
// inserted after l2norm for q and k, per-token gates, the learned initial memory and the Omega/Muon kernel with
// its decode state. Used by the dla / swla / omeganet / atlas / atlas_pp mixers and the atlas hybrids.
//   q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = SiLU(Conv4(x W_v))        per head, d_k = d_v = d_h
//   α = σ(x w_α + b_α), η = η_max σ(x w_η + b_η), γ = σ(x w_γ + b_γ), θ = σ(x w_θ + b_θ)   per token and head
//   y_t = M_t(q_t) with the Omega rule of runtime/atlas/omega.h
// Decode state under `key`: "<key>_w*", "<key>_a*", "<key>_s*" (memory, anchor, momentum), "<key>_offset",
// "<key>_bk", "<key>_bkf", "<key>_bv", "<key>_bg" (window ring buffer of the last c-1 tokens) + conv caches;
// with ns_granularity = chunk also "<key>_nsa", "<key>_nsc" (the chunk's A_{s..t} and c_t, omega.h).
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/atlas/omega.h"
#include "core/common.h"
#include "runtime/mixer.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"

namespace mnemo {

struct AtlasCoreOptions {
  std::string family = "atlas";
  int64_t d_model = 0, heads = 0, head_dim = 0;
  int64_t chunk_size = 64, window = 8, conv_size = 4, expansion = 4, phi_degree = 2, ns_steps = 5;
  bool use_short_conv = true, use_gamma = true, muon = false, recurrent = false;
  std::string memory = "mlp";                 // "mlp" | "linear" | "gated_mlp"
  std::string phi = "taylor_elementwise";     // "taylor_elementwise" | "taylor_full2" | "identity"
  std::string loss = "l2";                    // "l2" | "dot"
  double alpha_bias = 6.0, eta_max = 0.0, eta_bias = 0.0, gamma_bias = 3.0, theta_bias = 2.0;  // eta_max 0: 1/c
  std::string readout = "token", ns_granularity = "token", ns_precision = "fp32";  // Muon options (omega.h)
  bool recompute = true;  // Muon: rerun each chunk in backward (omega.h OmegaOptions::recompute)
  std::string key = "atlas";
};

// φ (docs/models.md#atlas-family): taylor_elementwise φ(x) = concat_i a_i x^{⊙i} (i = 1..p, learnable a_i init 1/i!, D = p d);
// taylor_full2 (Based): [1, x/d^{1/4}, x_i²/(√2 √d), x_i x_j/√d (i<j)], D = 1 + d + d(d+1)/2; identity: D = d.
struct FeatureMapImpl : torch::nn::Module, DeclaresNoWeightDecay {
  FeatureMapImpl(const std::string& kind, int64_t d, int64_t degree);
  std::vector<std::string> no_weight_decay() const override {
    return coef.defined() ? std::vector<std::string>{"coef"} : std::vector<std::string>{};
  }
  torch::Tensor forward(const torch::Tensor& x);
  int64_t dim() const { return D; }
  std::string kind;
  int64_t d, degree, D;
  torch::Tensor coef;           // a_1..a_p (taylor_elementwise)
  torch::Tensor iu_r, iu_c;     // upper-triangle indices (taylor_full2)
};
TORCH_MODULE(FeatureMap);

struct AtlasCoreImpl : torch::nn::Module, DeclaresNoWeightDecay {
  explicit AtlasCoreImpl(const AtlasCoreOptions& o);
  std::vector<std::string> no_weight_decay() const override;  // the learned initial memory
  // x [B, T, D] -> y [B, T, H, d_h]; with a state continues from it and stores the new one (detached unless
  // detach = false).
  torch::Tensor forward(const torch::Tensor& x, LayerState* state, bool detach = true);
  // The current memory weights (the learned initial memory when the state is fresh), each [B, H, out, in].
  MemoryWeights current_weights(LayerState* state, int64_t batch, torch::ScalarType dt);
  // MAC retrieval h = M_w(φ(q(x))) (residual q(x)) through the query path with its own conv cache `key`:
  // x [B, T, D] -> [B, T, H, d_h] in the compute dtype of w.
  torch::Tensor read(const MemoryWeights& w, const torch::Tensor& x, LayerState* state, const std::string& key,
                     bool detach);

  AtlasCoreOptions opt;
  DeepMemorySpec spec;
  OmegaOptions kernel;
  HeadProjection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  FeatureMap phi{nullptr};
  torch::nn::Linear gate_proj{nullptr};  // logits α, η, γ, θ (θ only with Muon)
  std::vector<torch::Tensor> init_weights;  // learned M_0 [H, out, in]
};
TORCH_MODULE(AtlasCore);

// Args fields shared by every Atlas-family args struct (docs/models.md#atlas-family defaults per family). omega_window = c (named apart
// from the SWA `window` of the hybrids' flat config); eta_max = 0 means 1/c (docs/models.md#dla-swla-and-omeganet).
#define ATLAS_GD_FIELDS(CHUNK, WINDOW, MEMORY, LOSS, ALPHA_B, ETA_MAX, USE_GAMMA)                    \
  int64_t num_heads = 0;                 /* 0: the model's n_heads; d_k = d_v = d_model / heads */ \
  int64_t chunk_size = CHUNK;            /* b: part of the model (docs/models.md#conventions) */                         \
  int64_t omega_window = WINDOW;         /* c (docs/models.md#atlas-family) */                                             \
  int64_t conv_size = 4;                                                                           \
  bool use_short_conv = true;                                                                      \
  std::string form = "chunk";            /* "chunk" | "recurrent" (same function) */                \
  std::string memory = MEMORY;           /* "mlp" | "linear" | "gated_mlp" (docs/models.md#deep-memory) */                \
  int64_t expansion = 4;                                                                           \
  std::string phi = "taylor_elementwise"; /* | "taylor_full2" | "identity" (docs/models.md#atlas-family) */                \
  int64_t phi_degree = 2;                                                                          \
  std::string loss = LOSS;               /* "l2" (Omega) | "dot" (Hebbian, docs/models.md#dla-swla-and-omeganet) */                 \
  double alpha_bias = ALPHA_B;                                                                     \
  double eta_max = ETA_MAX;                                                                        \
  double eta_bias = 0.0;                                                                           \
  bool use_gamma = USE_GAMMA;            /* γ_i = σ(x w_γ + b_γ) (docs/models.md#atlas-family); false: γ ≡ 1 */             \
  double gamma_bias = 3.0;

// Muon fields of the ATLAS args structs (docs/models.md#atlas): θ bias, NS-k, and the recorded cost options of omega.h.
#define ATLAS_MUON_FIELDS                                                                             \
  double theta_bias = 2.0;               /* momentum θ = σ(x w_θ + b_θ) ≈ 0.88 */                    \
  int64_t ns_steps = 5;                  /* NS-k (docs/models.md#newton-schulz-orthogonalisation) */                                            \
  std::string atlas_readout = "token";   /* "token" (docs/models.md#atlas step 5) | "chunk_start" (y_t = M^0(q_t)) */ \
  std::string ns_granularity = "token";  /* "token" | "chunk" (one Muon step per chunk) */            \
  std::string ns_precision = "fp32";     /* "fp32" | "bf16" (NS iterates, for CUDA) */                \
  bool atlas_recompute = true;           /* rerun each chunk in backward (memory of one chunk) */

#define ATLAS_MUON_NAMES theta_bias, ns_steps, atlas_readout, ns_granularity, ns_precision, atlas_recompute

#define ATLAS_GD_NAMES                                                                                       \
  num_heads, chunk_size, omega_window, conv_size, use_short_conv, form, memory, expansion, phi, phi_degree, \
      loss, alpha_bias, eta_max, eta_bias, use_gamma, gamma_bias

// Resolves the core options from any Atlas args struct (as json) for `family` (mixer.cpp); muon: ATLAS optimiser.
AtlasCoreOptions atlas_core_options(const std::string& family, const MixerContext& ctx, const json& a, bool muon);

// Why the CPU quickstart leaves out a family whose memory is ATLAS's (the report's reason; `family` names it,
// e.g. "ATLAS MAG's memory branch"). Measured for ATLAS: docs/performance.md#atlas-cost-keys.
inline std::string atlas_quickstart_note(const std::string& family) {
  return "cost: " + family + " is ATLAS's memory, which in its default (exact) form (a Muon step per token, chunk 16) "
         "trains on this CPU at about 1 % of Gated DeltaNet's speed, far beyond the 25-minute budget; with the "
         "chunk-granularity cost keys the ATLAS models train at 0.25-0.55 of it (docs/performance.md#atlas-cost-keys), still "
         "beyond the MQAR stage's budget";
}

}  // namespace mnemo
