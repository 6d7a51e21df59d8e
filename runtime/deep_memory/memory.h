// Deep (MLP) associative memory shared by Titans, Miras, TTT-MLP and the Atlas GD family
// (docs/models.md#deep-memory, docs/models.md#titans). Everything here is a plain differentiable tensor op: the outer
// loss back-propagates through the closed-form inner gradients (no double autograd).
//
// Kinds (per head, column-vector maths, storage [B, H, out, in] for every weight matrix):
//   Linear          M(z) = W z                                  weights {W [d_out, d_in]}        (L_M = 1)
//   ResidualMLP     M(z) = z + W_1 GELU(W_2 z)                  weights {W_2 [hid, d_in], W_1 [d_out, hid]}
//   ResidualMLP_LN  M(z) = z + LN(W_1 GELU(W_2 z)) ⊙ γ + β       same weights; γ, β outer (not inner-updated)
//   GatedMLP        M(z) = z + W_1 (GELU(W_2 z) ⊙ (W_3 z))          weights {W_2, W_3 [hid, d_in], W_1 [d_out, hid]}
// with hid = expansion · d_in (expansion 4), exact erf GELU, LN eps 1e-5. Residual kinds need d_in == d_out.
// Feature map (Atlas family, §2.8/§7.2): with d_feat > 0 the first matrices read a lifted input z̃ = φ(z) of width
// d_feat (passed as `z_feat`), the residual keeps the un-lifted z: M(z) = z + W_1 GELU(W_2 φ(z)); Linear:
// M(z) = W φ(z). Without z_feat, z̃ = z (φ = identity, d_feat = 0 or d_in).
// Weights are ordered **input to output**: weights[0] is the first matrix applied (W_2 for the MLPs).
//
// Inner gradient of one token with output gradient g_y = ∂ℓ/∂M(k) (ℓ2: g_y = M(k) - v; ℓp/Huber: the caller's
// formula) is a sum of rank-1 terms, one per weight matrix l: ∇W_l = col_l row_l^T (RankOneTerms).
//
// Dual form (chunk read-out without per-token weights). Inside a chunk with per-token weights
//   W_t = A_t W^b + D_t S^b - Σ_j C[t, j] col_j row_j^T          (every weight matrix, same coefficients)
// (W^b base weights = state before the chunk, S^b the momentum before the chunk, rank-1 terms evaluated at the
// gradient anchor W^0 — normally W^b; they differ only when a chunk is entered mid-way, e.g. after decoding),
// dual_form_readout returns y_t = M_{W_t}(z_t) with two masked b×b matmuls per weight matrix.
// combine_state materialises a W_t (chunk end, momentum end) from the same pieces.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

namespace mnemo {

enum class MemoryKind { Linear, ResidualMLP, ResidualMLP_LN, GatedMLP };

// "linear" | "mlp" | "mlp_ln" | "gated_mlp"; throws Error naming `field` and the value otherwise.
MemoryKind memory_kind_from_string(const std::string& s, const std::string& field = "memory_kind");
std::string memory_kind_name(MemoryKind k);

struct DeepMemorySpec {
  MemoryKind kind = MemoryKind::ResidualMLP;
  int64_t d_in = 0, d_out = 0;
  int64_t expansion = 4;  // hidden width = expansion · d_in
  double ln_eps = 1e-5;   // ResidualMLP_LN only
  int64_t d_feat = 0;     // width of φ(z) read by the first matrices (docs/models.md#atlas-family D); 0: d_in

  int64_t hidden() const { return expansion * d_in; }
  int64_t feat() const { return d_feat > 0 ? d_feat : d_in; }
  size_t num_weights() const { return kind == MemoryKind::Linear ? 1 : kind == MemoryKind::GatedMLP ? 3 : 2; }
  // [out, in] of weights[l], input-to-output order.
  std::vector<std::vector<int64_t>> weight_shapes() const;
  void validate(const std::string& who) const;  // throws Error naming `who`, the field and value
};

struct LayerState;  // runtime/mixer.h
using MemoryWeights = std::vector<torch::Tensor>;  // each [B, H, out, in] (or [H, out, in] for parameters)

// Outer LN affine of ResidualMLP_LN; each broadcastable to [B, H, N, d_out] (e.g. [H, 1, d_out] or [d_out]).
// Undefined tensors mean γ = 1, β = 0.
struct MemoryNorm {
  torch::Tensor gamma, beta;
};

// Xavier-uniform initial weights [H, out, in] (docs/models.md#deep-memory learned initial state), fp32.
MemoryWeights init_memory_weights(const DeepMemorySpec& spec, int64_t n_heads);
// The memory weights a sequence continues from: the decode state's (`<key>_w<l>`) when it holds them, else the
// learned initial weights [H, out, in] broadcast over the batch, in dtype dt.
MemoryWeights current_memory_weights(const MemoryWeights& init_weights, const std::string& key, LayerState* state,
                                     int64_t batch, torch::ScalarType dt);

// Forward pass with the intermediates the closed-form gradients need. z: [B, H, N, d_in].
// Weights may carry extra leading batch dims (e.g. per-token weights [B, H, N, out, in] with z [B, H, N, 1, d]).
// z_feat: φ(z) [.., d_feat] (undefined: z).
struct MemoryActivations {
  std::vector<torch::Tensor> inputs;  // inputs[l]: the row vectors entering weights[l], [B, H, N, in_l]
  torch::Tensor h;                    // pre-activation W_2 z [B, H, N, hid] (MLP kinds)
  torch::Tensor gelu, gelu_grad;      // GELU(h) and GELU'(h) (MLP kinds; gelu_grad only from memory_forward)
  torch::Tensor gate;                 // GatedMLP: W_3 z̃ [B, H, N, hid]
  torch::Tensor u, n, s;              // LN kind: u = W_1 a, n = (u - mean)/s, s = sqrt(var + eps) ([.., 1])
  torch::Tensor out;                  // M(z) [B, H, N, d_out]
};
MemoryActivations memory_forward(const DeepMemorySpec& spec, const MemoryWeights& w, const torch::Tensor& z,
                                 const MemoryNorm& norm = {}, const torch::Tensor& z_feat = {});
torch::Tensor memory_apply(const DeepMemorySpec& spec, const MemoryWeights& w, const torch::Tensor& z,
                           const MemoryNorm& norm = {}, const torch::Tensor& z_feat = {});

// Closed-form per-token gradient of ℓ w.r.t. every weight as rank-1 terms (docs/models.md#deep-memory):
// ∇W_l(token n) = cols[l][n] rows[l][n]^T. cols[l]: [B, H, N, out_l], rows[l]: [B, H, N, in_l].
// For ResidualMLP_LN, cols of W_1 are g_u (the gradient at the LN input), as the dual form needs.
// GatedMLP: r = W_1^T g_y; cols {r ⊙ u ⊙ σ'(h), r ⊙ σ(h), g_y}, rows {z̃, z̃, a} (docs/models.md#deep-memory).
struct RankOneTerms {
  std::vector<torch::Tensor> cols, rows;
};
RankOneTerms memory_grad_terms(const DeepMemorySpec& spec, const MemoryWeights& w, const MemoryActivations& acts,
                               const torch::Tensor& g_y, const MemoryNorm& norm = {});

// docs/models.md#titans-inner-gradient-clamp `inner_grad_clip`: the per-token (and per-head) gradient-norm soft clamp g ← g · τ/max(τ, ||g||),
// ||g||² = Σ_l ||cols_l[n]||² ||rows_l[n]||² (each weight's gradient is one outer product), applied to the cols.
// Scaling the terms, not a materialised gradient, keeps the chunked and token-by-token forms one function.
// tau <= 0: the terms unchanged.
RankOneTerms clip_grad_terms(const RankOneTerms& terms, double tau);

// Σ_n c[n] cols[n] rows[n]^T for every weight; c: [B, H, N] -> weights [B, H, out, in].
MemoryWeights weighted_outer_sum(const RankOneTerms& terms, const torch::Tensor& c);
// Per-token gradients materialised, [B, H, N, out, in] per weight (tests, references).
MemoryWeights per_token_grads(const RankOneTerms& terms);

// Coefficients of the per-token states inside one chunk of b tokens (scalar per token and head).
// EXTENSION POINT (channel-wise decays, Miras/Titans `diag(·)` gates): a per-channel variant would carry
// A, D as [B, H, b, out_l] and C as [B, H, b, b, out_l] per weight matrix (decay acting on the output rows);
// dual_form_readout / combine_state then scale each output channel separately. Not implemented yet:
// check_scalar_coefficients() rejects any other shape, so a future `ChannelCoefficients` overload can be added
// without changing these signatures.
struct DualCoefficients {
  torch::Tensor A;  // [B, H, b]    coefficient of the base weights W^b
  torch::Tensor D;  // [B, H, b]    coefficient of the carried momentum S^b (undefined: no momentum)
  torch::Tensor C;  // [B, H, b, N] weights of the rank-1 terms (N = b: lower-triangular; N != b: e.g. the Omega
                    // window of docs/models.md#dla-swla-and-omeganet, b × (b + c - 1), over terms that include carried tokens)
};
void check_scalar_coefficients(const DualCoefficients& c);

// y_t = M_{W_t}(z_t), W_t = A_t W^b + D_t S^b - Σ_j C[t, j] col_j row_j^T, for z: [B, H, b, d_in].
// `momentum` may be empty (then D is ignored). terms: N rank-1 terms (N = C.size(-1)); z_feat: φ(z) or undefined.
torch::Tensor dual_form_readout(const DeepMemorySpec& spec, const MemoryWeights& base, const MemoryWeights& momentum,
                                const DualCoefficients& coef, const RankOneTerms& terms, const torch::Tensor& z,
                                const MemoryNorm& norm = {}, const torch::Tensor& z_feat = {});

// a · W^b + d · S^b - Σ_j c[j] col_j row_j^T for every weight; a, d: [B, H] (d undefined or S empty: no term),
// c: [B, H, N]. Used for the chunk-end weights and the chunk-end momentum.
MemoryWeights combine_state(const MemoryWeights& base, const MemoryWeights& momentum, const torch::Tensor& a,
                            const torch::Tensor& d, const RankOneTerms& terms, const torch::Tensor& c);

// GD with momentum and weight decay (Titans §5.3; reused by any family of the form
//   S_t = η_t S_{t-1} - θ_t u_t,  W_t = (1 - α_t) W_{t-1} + S_t,  u_t = ∇ℓ at the chunk anchor):
// log_keep = log(1 - α) [B, H, b] (undefined: α ≡ 0), log_eta = log η [B, H, b] (undefined: η ≡ 0, no momentum),
// theta [B, H, b]. E1, E2 are built from cumulative sums as masked exponentials of non-positive differences.
struct MomentumChunkCoefficients {
  DualCoefficients dual;      // A_t = R_{s-1..t}, D_t = Σ_m R_{m..t} P_{s..m}, C = E1 E2
  torch::Tensor mom_keep;     // [B, H, b]: P_{s..t}, coefficient of S^b in S_t (undefined without momentum)
  torch::Tensor mom_c;        // [B, H, b, b]: E2[t, j] = θ_j P_{j+1..t}, weights of u_j in -S_t
};
MomentumChunkCoefficients momentum_chunk_coefficients(const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                                                      const torch::Tensor& theta);

// One token of the same recurrence with materialised weights (reference and decode step):
//   S ← η S - θ u,  W ← (1 - α) W + S   (keep = 1 - α, eta/keep undefined: η ≡ 0 / α ≡ 0);
// u = Σ_l cols rows^T of a single token (N = 1 terms). keep, eta, theta: [B, H]. Updates w, s in place
// (tensor re-assignment, not in-place ops; autograd-safe). s may be empty when eta is undefined.
void momentum_step(MemoryWeights& w, MemoryWeights& s, const torch::Tensor& keep, const torch::Tensor& eta,
                   const torch::Tensor& theta, const RankOneTerms& single_token_terms);

}  // namespace mnemo
