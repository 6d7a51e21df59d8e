// Atlas GD/Muon family kernels (docs/models.md#atlas-family, docs/models.md#dla-swla-and-omeganet, docs/models.md#atlas): the Omega rule over a sliding window of c tokens with
// per-token gates, gradients at the chunk anchor (docs/models.md#conventions), for the deep memories of runtime/deep_memory.
//
// Per head, column form, read after write (docs/models.md#conventions); win(t) = [t-c+1, t] ∩ [0, t]; M^0 = anchor (chunk-start state):
//   g_i = ∇_M ℓ_i(M^0)              ℓ2   ("l2",  OmegaNet/ATLAS): ℓ_i = ½||M(φ(k_i)) - v_i||², g_y = M^0(k_i) - v_i
//                                   dot  ("dot", DLA/SWLA):      ℓ_i = -⟨M(φ(k_i)), v_i⟩,       g_y = -v_i (docs/models.md#dla-swla-and-omeganet)
//   u_t = Σ_{i ∈ win(t)} γ_i g_i
//   GD   (docs/models.md#dla-swla-and-omeganet):  M_t = α_t M_{t-1} - η_t u_t
//   Muon (docs/models.md#atlas):      S_t = θ_t S_{t-1} + u_t;  M_t = α_t M_{t-1} - η_t NS_k(S_t)   (NS per matrix and head, docs/models.md#newton-schulz-orthogonalisation)
//   y_t = M_t(q_t)  (memory input φ(q_t), residual q_t)
// Chunks of b tokens aligned to absolute positions; the anchor becomes M_t after every b-th token.
//
// Chunked GD (docs/models.md#dla-swla-and-omeganet): window positions [s-c+1, s+b-1] (the c-1 carried tokens re-evaluated at M^0),
//   C = (L ⊙ η) · (M_s ⊙ γ)  (b × (b+c-1)),  y via the dual form of docs/models.md#deep-memory (dual_form_readout with N = b+c-1).
// Chunked Muon (docs/models.md#atlas steps 1–5): per-token S_t as batched sums of outer products, batched NS, per-token weights
// (muon_chunk.cpp). Under autograd each chunk body is recomputed in the backward (only its inputs are saved), so
// the graph never holds the per-token weights and NS iterates of more than one chunk.
// Muon options (docs/models.md#atlas "atlas_readout = chunk_start"; [decision] ns_granularity):
//   readout "token" (default, exact docs/models.md#atlas): y_t = M_t(φ(q_t));  "chunk_start": y_t = M^0(φ(q_t)).
//   ns_granularity "token" (default): NS(S_t) every token;  "chunk" (needs readout chunk_start): one Muon step per
//   chunk, M_t = A_{s..t} M^0 - c_t NS(S_t) with c_t = Σ_{n=s}^{t} L[t, n] η_n (= α_t c_{t-1} + η_t), NS only where
//   M_t is needed (chunk end, call end); chunk size 1 is docs/models.md#atlas with read-before-write.
// The token-by-token forms (`*_recurrent`) are the references and the decode step.
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/deep_memory/memory.h"

namespace mnemo {

struct OmegaOptions {
  std::string loss = "l2";  // "l2" | "dot"
  int64_t window = 8;       // c >= 1
  int64_t chunk = 64;       // b >= 1
  bool muon = false;        // false: GD with decay; true: Muon (momentum + Newton–Schulz)
  int64_t ns_steps = 5;     // k of NS-k (Muon)
  std::string readout = "token";         // Muon: "token" | "chunk_start"
  std::string ns_granularity = "token";  // Muon: "token" | "chunk" (requires readout "chunk_start")
  std::string ns_precision = "fp32";     // Muon: "fp32" (docs/models.md#numerical-stability rule 1) | "bf16" (NS iterates in bf16, for CUDA)
  bool recompute = true;  // Muon chunk form under autograd: save chunk inputs, rerun the chunk body in backward
};

// Per-token inputs. q, k: [B, T, H, d]; qf, kf = φ(q), φ(k): [B, T, H, D] (undefined: identity);
// v: [B, T, H, d_v]; log_alpha = log α [B, T, H] (undefined: α ≡ 1); eta [B, T, H];
// gamma [B, T, H] (undefined: γ ≡ 1); log_theta = log θ [B, T, H] (Muon only).
struct OmegaInputs {
  torch::Tensor q, qf, k, kf, v, log_alpha, eta, gamma, log_theta;
};

// State after a call. Window buffer: the last c-1 tokens (zeros with γ = 0 before the sequence start).
struct OmegaState {
  MemoryWeights w;       // M_t, each [B, H, out, in]
  MemoryWeights s;       // Muon momentum S_t (empty: zero)
  MemoryWeights anchor;  // M^0 (empty: w; valid when offset == 0)
  int64_t offset = 0;    // tokens of the current chunk already absorbed
  torch::Tensor buf_k, buf_kf, buf_v, buf_g;  // [B, H, c-1, d | D | d_v], [B, H, c-1]; undefined: empty window
  torch::Tensor ns_decay, ns_step;  // ns_granularity "chunk": A_{s..t}, c_t [B, H] (undefined: chunk start, 1 / 0)
};

struct OmegaResult {
  torch::Tensor y;  // [B, T, H, d_v]
  OmegaState state;
};

// Compute dtype fp64 if q is fp64, else fp32 (docs/models.md#conventions); y returned in v's dtype.
OmegaResult omega_chunk(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                        const OmegaState& init);
OmegaResult omega_recurrent(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                            const OmegaState& init);
// omega_chunk runs each GD chunk of the residual-MLP memory as one fused autograd node
// (runtime/deep_memory/fused_chunk.h); this runs it op by op under autograd: the reference for that node's
// hand-written backward (tests/test_fused_chunk.cpp). Muon chunks are the same in both.
OmegaResult omega_chunk_composed(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                                 const OmegaState& init);

// Newton–Schulz-k (docs/models.md#newton-schulz-orthogonalisation) on the last two dims of G [..., r, c], in G's dtype:
//   X = G/(||G||_F + 1e-7); transpose if r > c; k × { A = X X^T; B = b A + c A A; X = a X + B X }.
// One [N, min(r,c), max(r,c)] batch of fused matmuls; under autograd the iterations have a hand-written adjoint
// (newton_schulz.cpp), which saves X, A, B per iteration instead of autograd's every matmul operand.
// bf16: the iterations in bf16 (the Muon reference's precision; G's dtype outside them).
torch::Tensor newton_schulz(const torch::Tensor& G, int64_t steps = 5, bool bf16 = false);
// Validates the Muon options (readout, ns_granularity, ns_precision); throws Error naming the field and value.
void check_muon_options(const OmegaOptions& opt, const std::string& who);

// Internal pieces (prepare.cpp) shared by the GD forms (naive.cpp, chunk.cpp) and the Muon kernels (atlas.cpp).
namespace atlas_detail {
struct Prepared {
  torch::ScalarType dt;
  OmegaInputs in;  // cast, gates filled in (gamma defined)
  MemoryWeights w, s, anchor;
  torch::Tensor bk, bkf, bv, bg;  // window buffers [B, H, c-1, .]
  torch::Tensor ns_decay, ns_step;  // ns_granularity "chunk" accumulators [B, H]
};
Prepared prepare(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in, const OmegaState& init);
// [B, T, H, ...] -> [B, H, n, ...], tokens [a, a + n)
torch::Tensor bh(const torch::Tensor& x, int64_t a, int64_t n);
// The inputs cut into pieces of `sizes` tokens, every field [B, H, n, ...] (chunking.h time_pieces: one split).
std::vector<OmegaInputs> split_inputs(const OmegaInputs& in, const std::vector<int64_t>& sizes);
// Rank-1 inner-gradient terms at `anchor` of the window tokens (k, kf, v: [B, H, N, .]).
RankOneTerms window_terms(const DeepMemorySpec& spec, const OmegaOptions& opt, const MemoryWeights& anchor,
                          const torch::Tensor& k, const torch::Tensor& kf, const torch::Tensor& v);
// Band mask M_s (docs/models.md#shared-building-blocks) of n chunk tokens over N = n + c - 1 window positions: 1 iff t <= j <= t + c - 1.
torch::Tensor band_mask(int64_t n, int64_t c, const torch::TensorOptions& o);
// Keep the last c-1 of the window arrays (cat(buffer, piece)).
void roll_buffers(Prepared& p, int64_t c, const torch::Tensor& k, const torch::Tensor& kf, const torch::Tensor& v,
                  const torch::Tensor& g);
OmegaResult finish(const Prepared& p, std::vector<torch::Tensor>& ys, const OmegaInputs& raw, int64_t offset);

// One chunk piece of the Muon chunk form (muon_chunk.cpp): window arrays K, KF, V, G [B, H, N = n + c - 1, .],
// the piece's queries qc, qfc [B, H, n, .] and gates lth, la, eta [B, H, n] (la defined), the state before it.
// Returns y [B, H, n, d_v] and updates p.w, p.s (and p.ns_decay, p.ns_step); recomputed in backward when
// opt.recompute and autograd records.
torch::Tensor muon_chunk_piece(const DeepMemorySpec& spec, const OmegaOptions& opt, Prepared& p,
                               const torch::Tensor& K, const torch::Tensor& KF, const torch::Tensor& V,
                               const torch::Tensor& G, const torch::Tensor& qc, const torch::Tensor& qfc,
                               const torch::Tensor& lth, const torch::Tensor& la, const torch::Tensor& eta);
}  // namespace atlas_detail

// Muon kernels (atlas.cpp); omega_chunk / omega_recurrent dispatch here when opt.muon.
OmegaResult atlas_muon_chunk(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                             const OmegaState& init);
OmegaResult atlas_muon_recurrent(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                                 const OmegaState& init);

}  // namespace mnemo
