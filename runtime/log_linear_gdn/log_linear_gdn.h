// Log-linear Gated DeltaNet and log-linear (scalar-decay) attention kernels (docs/models.md#log-linear-gated-deltanet;
// Guo et al., "Log-Linear Attention", arXiv 2506.04761 §3 (the Fenwick-tree partition and the level-weighted
// read-out) and §4 (log-linear Mamba-2 and log-linear Gated DeltaNet); fixture ops `log_linear_attn`,
// `log_linear_gdn`).
//
// Levels. For a query at absolute position t and a key at position s <= t the level is
//   lev(t, s) = 0 for s == t,   else  bit_length(t XOR s)
// so level 0 is the token itself and level ℓ >= 1 is the bucket [t with bits < ℓ cleared, + 2^{ℓ-1}) present when
// bit ℓ-1 of t is set (flash-linear-attention's level masks in fla/ops/log_linear_attn/naive.py, the reference
// code's "weak" partition). With NL level weights, levels >= NL - 1 share the weight of level NL - 1 (their states
// are one state): NL >= bit_length(T_total - 1) + 1 (log_linear_num_levels) leaves every level its own weight.
//
// Recurrence (row-vector convention, per head; one state S^(ℓ) [K, V] per level):
//   A_t = exp(g_t) (I - β_t k_tᵀ k_t)        (Gated DeltaNet; scalar-decay mode, beta undefined: A_t = exp(g_t) I)
//   S^(ℓ) <- A_t S^(ℓ) for every level, then S^(0) += β_t k_tᵀ v_t   (k_tᵀ v_t in scalar-decay mode)
//   o_t = Σ_ℓ λ_t^(ℓ) (scale q_t) S^(ℓ)
//   then, before position t + 1, the Fenwick carry: with c = ctz(t + 1), levels 0..c merge into level c + 1
//   (min(c + 1, NL - 1), the shared top level, where it is beyond the weights).
// With every λ = 1 this is Gated DeltaNet (the level states sum to its state); in scalar-decay mode it is
// log-linear Mamba-2 (fla's naive_log_linear_attn).
//
// State: [B, H, NL, K, V] in the compute dtype, the levels of the partition of the prefix [0, p) for the next
// position p (level 0 is empty except where NL == 1), together with p itself (`start` of the next call: the number
// of tokens the state has absorbed). Layout: q, k [B, T, H, K], v [B, T, H, V], beta and g [B, T, H] (g a log
// decay <= 0), level_weights [B, T, H, NL]. Both forms are differentiable (plain autograd ops) and compute in fp32,
// or fp64 when any input is fp64; o is returned in v's dtype.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

namespace mnemo {

struct MixingFlopsQuery;
// FLOPs per token of a log-linear mixer (log_linear_gdn, log_linear_mamba2; runtime/mixing_flops.h): the chunked
// recurrence's cost with the state read and updated once per occupied level state — 1 + popcount(chunk index) states
// before a chunk (one per set bit of the Fenwick counter), capped at num_levels; a decode step at position t reads
// and updates 1 + popcount(t) of them.
double log_linear_mixing_flops(const MixingFlopsQuery& q);

struct LogLinearResult {
  torch::Tensor o;            // [B, T, H, V]
  torch::Tensor final_state;  // [B, H, NL, K, V]
};

// Levels that give every (query, key) pair of `length` tokens (positions 0..length-1) its own weight:
// bit_length(length - 1) + 1, i.e. ceil(log2 length) + 1 (1 for length <= 1).
int64_t log_linear_num_levels(int64_t length);

// Token-by-token recurrence over the Fenwick level states; T == 1 is the O(NL·K·V) decode step. beta undefined:
// scalar-decay mode; g undefined: no decay; initial_state undefined: empty; `start`: the absolute position of the
// first token (the tokens initial_state has absorbed).
LogLinearResult log_linear_gdn_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& beta, const torch::Tensor& g,
                                         const torch::Tensor& level_weights, const torch::Tensor& initial_state,
                                         int64_t start, double scale);

// Chunked form, chunk_size a power of two. Inside a chunk the level-masked quadratic form
// O = ((P T) ⊙ Γ ⊙ Λ) diag(β) V (P = tril(Q Kᵀ), T = (I + stril(diag(β) K Kᵀ))⁻¹, Γ the decays, Λ_ij = λ_i^(lev)),
// across chunks one state per chunk-level (levels > log2 chunk_size hold whole chunks), carried and merged at chunk
// boundaries. Tokens before the first chunk boundary at or after `start` (all of the first chunk when an initial
// state is given) and after the last full chunk run the recurrence. Exact rewrite of log_linear_gdn_recurrent.
// output_final_state = false returns no final state (undefined) and runs the tokens after the last full chunk as
// one more chunk padded with inert tokens instead of the recurrence (the outputs are the same).
LogLinearResult log_linear_gdn_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& beta, const torch::Tensor& g,
                                     const torch::Tensor& level_weights, const torch::Tensor& initial_state,
                                     int64_t start, double scale, int64_t chunk_size, bool output_final_state = true);

// One decode token (T == 1) on fixed shapes, for a step that a CUDA graph replays: every level of `state`
// [B, H, NL, K, V] is read and updated (an empty level is zeros), and the Fenwick carry after the token is applied
// by masks computed on the device from `position` ([1] int64 on the state's device: the tokens the state has
// absorbed), so nothing is read back to the host. Equals log_linear_gdn_recurrent at start = position (outputs and
// the final state with empty levels as zeros); the caller advances the position.
LogLinearResult log_linear_gdn_static_step(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& beta, const torch::Tensor& g,
                                           const torch::Tensor& level_weights, const torch::Tensor& state,
                                           const torch::Tensor& position, double scale);

struct LayerState;  // runtime/mixer.h
// The layers' call (log_linear_gdn, log_linear_mamba2; runtime/log_linear_gdn/mixer.cpp): the chunked form (`form`
// "chunk", more than one token) or the recurrence from the state's "memory" levels at LayerState::pos, or inside a
// static decode step (runtime/mixer.h StaticDecodeScope) log_linear_gdn_static_step at the state's "position". With a
// state it leaves the final levels in "memory" and the tokens absorbed in "position" ([1] int64 on the inputs'
// device). Returns o [B, T, H, V].
torch::Tensor log_linear_layer_call(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& beta, const torch::Tensor& g,
                                    const torch::Tensor& level_weights, LayerState* state, double scale,
                                    const std::string& form, int64_t chunk_size);

// Shared argument checks; throw mnemo::Error naming the tensor or argument and its shape or value.
void check_log_linear_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& level_weights,
                             const torch::Tensor& initial_state, int64_t start);

// Pieces shared by the two forms (runtime/log_linear_gdn/naive.cpp).
namespace log_linear_detail {
// The Fenwick carry before position p_next (>= 1) on per-level states (an undefined tensor is an empty level).
void carry(std::vector<torch::Tensor>& levels, int64_t p_next);
// The recurrence over T tokens from absolute position p0 on per-level states (updated in place of the vector):
// inputs already in the compute dtype, q already scaled, decay = exp(g) or undefined. Returns o [B, T, H, V].
torch::Tensor steps(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& beta,
                    const torch::Tensor& decay, const torch::Tensor& level_weights,
                    std::vector<torch::Tensor>& levels, int64_t p0);
// Per-level states from a [B, H, NL, K, V] state (undefined: NL empty levels), and back (empty levels as zeros).
std::vector<torch::Tensor> unstack(const torch::Tensor& state, int64_t NL);
torch::Tensor stack(const std::vector<torch::Tensor>& levels, const torch::TensorOptions& opts,
                    const std::vector<int64_t>& level_shape);
}  // namespace log_linear_detail

}  // namespace mnemo
