// Hope (Behrouz, Razaviyayn, Zhong, Mirrokni, "Nested Learning: The Illusion of Deep Learning Architectures",
// NeurIPS 2025, arXiv 2512.24695 §8 / §3 of the conference version): a self-modifying Titans followed by a
// Continuum Memory System. No official code exists; docs/models.md#hope states every choice the paper leaves open.
//
// Self-modifying Titans (SMT; arXiv 2512.24695 §8.1–8.2, Eqs. 86–93), per batch row and head, with matrix-valued
// memories in the paper's residual form M(x) = x + x S (Eq. 89's skip path; row-vector convention): five memories
// S_□ for □ ∈ {k, v, η, α, mem}, updated chunk-wise with chunk size C. For token t of the chunk that starts with the
// states S_□^c (every read of the chunk uses them, Eq. 90), with M_□^c(x) = x + x S_□^c:
//   k_t = l2norm(M_k^c(a_t)),  v_t = l2norm(M_v^c(b_t)),  o_t = M_mem^c(q_t)
//   η_t = η_max σ(⟨M_η^c(a_t), w_η⟩ + b_η),  α_t = σ(⟨M_α^c(a_t), w_α⟩ + b_α)        (scalars per head)
//   v̂_□,t = M_□^c(v_t)                                                  (each memory generates its own value)
//   S_□,t = (α_t I − η_t k_tᵀ k_t) S_□,t−1 − η_t k_tᵀ (M_□^c(k_t) − v̂_□,t)
// (DGD with retention, Eq. 88, the L2 loss ½‖M(k) − v̂‖² differentiated at the chunk start, Eq. 91), and
// S_□^{c+1} = S_□ after the chunk's last token. Since M_□^c(k) − v̂_□ = (k − v)(I + S_□^c), the update is a gated delta
// rule (runtime/delta_rule) with e^{g_t} = α_t, β_t = η_t / α_t and value α_t (v_t − k_t)(I + S_□^c), which is how
// the chunk form builds each chunk's end state. a_t and b_t are the key-side and value-side inputs of the memories
// (the mixer's two projections of the token), q_t the one non-adaptive read.
// Layout: a (x_key), b (x_value), q [B, T, H, d]; w_eta, w_alpha [H, d]; b_eta, b_alpha [H]; memories
// [B, 5, H, d, d] in the order k, v, η, α, mem (SmtMemory); the initial memories `init` [5, H, d, d] are trained
// (meta-learned, Eq. 85).
//
// Continuum Memory System level (arXiv 2512.24695 §3, Eqs. 30–31): a residual two-layer MLP memory
//   M_θ(x) = x + SiLU(x W2) W1          (W2 [d, h], W1 [h, d]; Eq. 89's block)
// whose weights change every C tokens only: the tokens of chunk c read θ^c, and
//   W^{c+1} = W^c − (1 / C) Σ_{t ∈ chunk c} η_t / (1 + ‖u_t‖²) ∇_W ½‖M_{θ^c}(x_t) − v_t‖²     for W ∈ {W1, W2}
// with u_t the input of W's layer (a_t = SiLU(x_t W2) for W1, x_t for W2): one step of normalised mini-batch gradient
// descent on the chunk (as normalised LMS, so that the step stays stable whatever the inputs' scale), every gradient
// at θ^c as in Eq. 31. v_t (the target) and
// η_t > 0 are given per token by the caller. C = 0 is a level that never changes in context (a plain MLP).
// Layout: x, v [B, T, d]; eta [B, T]; weights per batch row W1 [B, h, d], W2 [B, d, h]; the pending sums of the
// current chunk P1, P2 (the same shapes) carry a chunk that a call ends inside of, so that decoding token by token
// equals the full forward.
//
// Both kernels' forms are plain autograd ops and compute in fp32, or fp64 when any input is fp64. `offset` is the
// number of tokens consumed before this call (the position of x's first token in the sequence); chunks are aligned
// to the sequence start.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace mnemo {

enum SmtMemory : int64_t { kSmtKey = 0, kSmtValue = 1, kSmtEta = 2, kSmtAlpha = 3, kSmtMemory = 4, kSmtMemories = 5 };

struct SmtGates {
  torch::Tensor w_eta, b_eta, w_alpha, b_alpha;  // [H, d], [H], [H, d], [H]
  double eta_max = 1.0;                           // η_t ∈ (0, η_max)
};

struct SmtResult {
  torch::Tensor o;          // [B, T, H, d]
  torch::Tensor chunk_start;  // S^c of the chunk that holds the next token [B, 5, H, d, d]
  torch::Tensor running;      // S after the last token [B, 5, H, d, d] (== chunk_start at a chunk boundary)
};

// Token by token (T == 1 is the O(1) decode step). chunk_start / running undefined: both start from `init`.
SmtResult smt_recurrent(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q, const torch::Tensor& init,
                        const SmtGates& gates, const torch::Tensor& chunk_start, const torch::Tensor& running,
                        int64_t chunk_size, int64_t offset);

// Chunk by chunk: every read of a chunk is one batched product, the chunk's end state one gated-delta-rule pass over
// the five memories together (delta_rule_chunk). Exact rewrite of smt_recurrent.
SmtResult smt_chunk(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q, const torch::Tensor& init, const SmtGates& gates,
                    const torch::Tensor& chunk_start, const torch::Tensor& running, int64_t chunk_size,
                    int64_t offset);

// Self-modifying Titans with MLP memories (the mixer's smt_memory "mlp"; docs/models.md#hope): every memory is the
// paper's residual block itself (Eq. 89), M_□(x) = x + SiLU(x W2_□) W1_□ with W2 [d, h] and W1 [h, d] per head. The
// reads are those above with M_□^c; each memory steps with the gradient of its own loss at the chunk start (Eq. 90)
// and the retention α, the step normalised as normalised LMS normalises a linear memory's:
//   W_□,t = α_t W_□,t−1 − η_t / (1 + ‖∇ℓ_t‖² / ‖e_t‖²) ∇_W ℓ_t,   ℓ_t = ½‖e_t‖²,  e_t = M_□^c(k_t) − v̂_□,t,
//   v̂_□,t = M_□^c(v_t),  W ∈ {W1, W2}  (one factor for both layers; for M(x) = x S it is 1 + ‖k‖²).
// The matrix memories' DGD term −η_t k_tᵀ k_t S_□,t−1 is the gradient
// at the running state (Eqs. 92–93); an MLP has no such closed form that keeps a chunk's step one batched product,
// so the MLP memories take plain gradient descent with retention. Within a chunk the step is then a weighted sum:
//   W^{end} = (Π_t α_t) W^{start} − Σ_t (η_t Π_{s>t} α_s) / (1 + ‖∇ℓ_t‖² / ‖e_t‖²) ∇_W ℓ_t,
// which is how the chunk form computes it.
// Layout: init_w1 [5, H, h, d], init_w2 [5, H, d, h] (trained); states [B, 5, H, h, d] and [B, 5, H, d, h].
struct SmtMlpMemories {
  torch::Tensor w1, w2;
};
struct SmtMlpResult {
  torch::Tensor o;                     // [B, T, H, d]
  SmtMlpMemories chunk_start, running;  // as SmtResult's
};
SmtMlpResult smt_mlp_recurrent(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                               const SmtMlpMemories& init, const SmtGates& gates, const SmtMlpMemories& chunk_start,
                               const SmtMlpMemories& running, int64_t chunk_size, int64_t offset);
SmtMlpResult smt_mlp_chunk(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                           const SmtMlpMemories& init, const SmtGates& gates, const SmtMlpMemories& chunk_start,
                           const SmtMlpMemories& running, int64_t chunk_size, int64_t offset);

struct CmsLevelState {
  torch::Tensor w1, w2;  // θ^c: [B, h, d], [B, d, h]
  torch::Tensor p1, p2;  // (1 / C) Σ η_t ∇ over the current chunk's tokens so far (zeros at a boundary)
};

struct CmsLevelResult {
  torch::Tensor y;  // [B, T, d]
  CmsLevelState state;
};

// Token by token (T == 1 is the decode step). state.w1 undefined: θ^0 = (w1_0, w2_0) [h, d], [d, h] for every row.
// chunk_size 0: no update (state stays undefined).
CmsLevelResult cms_level_recurrent(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                                   const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                                   int64_t chunk_size, int64_t offset);

// Chunk by chunk: the outputs and gradient sums of a chunk are batched products at θ^c. Exact rewrite of
// cms_level_recurrent.
CmsLevelResult cms_level_chunk(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                               const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                               int64_t chunk_size, int64_t offset);

// Shape checks of both kernels (mnemo::Error naming the tensor and its shape).
// The inputs and gates every self-modifying Titans form reads, whatever its memories (check_smt_inputs: and the
// matrix memories).
void check_smt_token_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                            const SmtGates& gates, int64_t chunk_size, int64_t offset);
void check_smt_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q, const torch::Tensor& init,
                      const SmtGates& gates, const torch::Tensor& chunk_start, const torch::Tensor& running,
                      int64_t chunk_size, int64_t offset);
void check_cms_level_inputs(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                            const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                            int64_t chunk_size, int64_t offset);

namespace hope_detail {
// The SMT memories at the start of a call: (chunk_start, running) broadcast from init where undefined, in dtype dt.
std::pair<torch::Tensor, torch::Tensor> smt_start_states(const torch::Tensor& init, const torch::Tensor& chunk_start,
                                                         const torch::Tensor& running, int64_t batch,
                                                         torch::ScalarType dt);
// The reads of one piece, head-major: k, v [B, H, n, d], eta, alpha [B, H, n]; and the output o [B, n, H, d].
struct SmtReads {
  torch::Tensor k, v, eta, alpha, log_alpha, o;
};
// The gates' weights in dtype dt, η's and α's side by side for one product with their two reads: w [1, 2, H, 1, d],
// b [1, 2, H, 1].
struct SmtGateWeights {
  torch::Tensor w, b;
  double eta_max = 1.0;
};
SmtGateWeights smt_gate_weights(const SmtGates& gates, torch::ScalarType dt);
// η_t = η_max σ(z_η), α_t = σ(z_α) from the gates' pre-activations z [B, 2, H, n] (η's then α's). log α_t is
// log σ(z_α) (finite where σ underflows), floored at kSmtLogAlphaFloor: the chunk forms take the step as a gated
// delta rule with β = η/α and decays Σ log α, and an α below ~1e-38 (z_α < -87 in fp32) would make β infinite
// and the decays -inf, hence NaN. The floor changes the recurrence only where α < e^-30 ≈ 9e-14.
constexpr double kSmtLogAlphaFloor = -30.0;
void smt_gate_values(SmtReads& r, const torch::Tensor& z, double eta_max);
// The five memories' inputs of a piece, stacked in the memories' order: [B, 5, H, n, d].
torch::Tensor smt_read_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q);
// The reads of a piece from the start states S [B, 5, H, d, d]; `in`: smt_read_inputs of the piece.
SmtReads smt_reads(const torch::Tensor& in, const torch::Tensor& S, const SmtGateWeights& gates);
// A CMS level's weights and pending sums at the start of a call, in dtype dt: θ^0 broadcast over the batch and zero
// sums where `state` is undefined.
CmsLevelState cms_start_state(const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                              int64_t batch, torch::ScalarType dt);
// The end of a chunk: θ^{c+1} = θ^c − the pending sums, which restart at zero.
void cms_apply_chunk_step(CmsLevelState& s);
// Tokens of the piece of a call that starts at absolute position `pos`: up to the next chunk boundary.
int64_t piece_length(int64_t pos, int64_t chunk_size, int64_t remaining);
// The lengths of the pieces of a call of T tokens from absolute position `offset` (piece_length one after another).
std::vector<int64_t> piece_lengths(int64_t T, int64_t offset, int64_t chunk_size);
// x [B, T, ...] cut along dim 1 into those pieces by one split (its backward is one gather, where a narrow per piece
// would add a zero-filled [B, T, ...] gradient per piece: O(T²/C) work and most of Hope's step before).
std::vector<torch::Tensor> split_pieces(const torch::Tensor& x, const std::vector<int64_t>& lengths);
// The self-modifying Titans' inputs in dtype dt, cut into a call's pieces (both memory kinds' chunk forms).
struct SmtPieces {
  std::vector<int64_t> lengths;
  std::vector<torch::Tensor> a, b, q;
};
SmtPieces smt_pieces(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                     torch::ScalarType dt, int64_t offset, int64_t chunk_size);
// SiLU and its derivative (the CMS memory's activation).
torch::Tensor silu_grad(const torch::Tensor& z);
}  // namespace hope_detail

}  // namespace mnemo
