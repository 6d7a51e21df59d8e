// Miras kernels (docs/models.md#miras, docs/models.md#moneta, docs/models.md#yaad, docs/models.md#memora): Moneta, Yaad, Memora on the residual MLP + LN memory
//   M(z) = z + LN(W_1 GELU(W_2 z)) ⊙ γ + β      (runtime/deep_memory: kind ResidualMLP_LN, storage [B, H, out, in])
// with channel-wise (or per-head scalar) retention α_t and learning rate η_t acting on the d_h axis of each
// memory matrix: the columns (input channels) of W_2 and the rows (output channels) of W_1 (docs/models.md#miras).
//
// Attentional bias (output gradient g_y of e = M(k) - v at the gradient anchor):
//   "l2":    g_y = e
//   "huber": g_y = m e + (1 - m) δ e / sqrt(e² + ε),  m = 1[ ||e|| / sqrt(d) ≤ δ ]  (Yaad, docs/models.md#yaad)
//   "lp":    g_y = p e ⊙ (e² + ε)^{(p-2)/2}                                          (Moneta, docs/models.md#moneta)
// Retention / chunk rule (chunks of b tokens aligned to absolute positions, docs/models.md#conventions):
//   "l2" (Yaad):   W_t = α_t ⊙ W_{t-1} - η_t ⊙ ∇ℓ(W^0; k_t, v_t),  W^0 = W at the chunk start.
//   "lq" (Moneta): A_t = α_t ⊙ A_{t-1} - η_t ⊙ ∇ℓ(W^0; k_t, v_t),  W^0 = A^0 / ||A^0||_q^{q-2} (chunk-start A^0),
//                  in-chunk reads use A_t / ||A^0||_q^{q-2} (normaliser frozen at the chunk start), the next
//                  chunk refreshes it; ||A||_q = (Σ|A_ij|^q)^{1/q} per matrix and head.
//   "kl" (Memora): first token s of each chunk (lag token):
//                    W_s = softmax_in( α_s ⊙ log max(W_{s-1}, floor) - η_s ⊙ ∇ℓ(W_{s-1}; k_s, v_s) )
//                  (softmax over each matrix's input axis: row-wise simplex), then for i = s+1 .. s+b-1
//                    W_i = α_i ⊙ W_{i-1} - η_i ⊙ ∇ℓ(W_s; k_i, v_i)   (anchor W_s).
// Read after write: o_t = M_{W_t}(q_t) (docs/models.md#conventions).
// `miras_chunk` reads with the channel-wise dual form (per chunk, Γ_ts = exp(b_t - b_s) with b the in-chunk
// cumulative log α: factorised as e^{b_t} e^{-b_s} when the span of b allows, else sub-chunks of `sub_chunk`
// tokens keep every exponent ≤ 0 and materialise Γ only on the diagonal [c, c, G] blocks, see chunk.cpp); `miras_recurrent` materialises W_t token by token with the same
// anchor rule. Both are differentiable tensor ops (fp32, or fp64 when any input is fp64).
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/deep_memory/memory.h"

namespace mnemo {

struct MirasOptions {
  std::string bias = "l2";       // "l2" | "huber" | "lp"
  std::string retention = "l2";  // "l2" | "lq" | "kl"
  double p = 3.0, q = 4.0;       // Moneta exponents
  double lp_eps = 1e-6;          // ε of the smooth |·|^{p-1} sign surrogate
  double huber_eps = 1e-6;       // ε of the smooth sign in the Huber ℓ1 branch
  double kl_floor = 1e-6;        // Memora: log(max(W, floor))
  int64_t chunk = 64;
  int64_t sub_chunk = 16;        // c: secondary chunking of the dual form (numerics only, not the model)
  // The dual form factorises the decays over the whole segment when their span allows (chunking.h
  // decay_factorisable) and sub-chunks otherwise; false: always sub-chunk (numerics only; tests both forms).
  bool factorise_decays = true;
  // The factorised segment and Memora's lag token as autograd nodes with hand-written backwards (fused_segment.h,
  // fused_lag.h); false: the same maths op by op (the reference the nodes are tested against).
  bool fused_segment = true;
  int64_t expansion = 4;
  double ln_eps = 1e-5;
};

// cur: W_t ("l2", "kl") or the accumulator A_t ("lq"), each [B, H, out, in] (W_2 first, as in deep_memory);
// anchor: the chunk-start value of cur ("l2", "lq") or the lag-token state W_s ("kl");
// pos: tokens of the current chunk already consumed (0 .. chunk-1).
struct MirasState {
  MemoryWeights cur, anchor;
  int64_t pos = 0;
};

struct MirasResult {
  torch::Tensor o;   // [B, T, H, d]
  MirasState state;  // state after the last token
};

// q, k, v [B, T, H, d]; log_alpha, eta [B, T, H, G] with G = d (channel-wise) or 1 (per head);
// delta [B, T, H] (bias "huber" only; may be undefined otherwise); gamma, beta [H, d] (LN affine);
// state.cur = initial weights (anchor and pos are taken from the state when pos > 0).
MirasResult miras_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                        const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                        const MirasOptions& opt);
MirasResult miras_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& delta,
                            const torch::Tensor& gamma, const torch::Tensor& beta, const MirasState& state,
                            const MirasOptions& opt);

// g_y of the attentional bias at the residual e = M(k) - v [B, H, n, d] (the table above); delta [B, H, n] (Huber).
// huber_switch (optional): Huber's per-token branch m [B, H, n, 1] (1: the ℓ2 branch).
torch::Tensor miras_bias_gradient(const torch::Tensor& e, const torch::Tensor& delta, const MirasOptions& o,
                                  torch::Tensor* huber_switch = nullptr);

// ||A||_q^{q-2} per matrix and head: [B, H, 1, 1].
torch::Tensor miras_lq_normaliser(const torch::Tensor& A, double q);

}  // namespace mnemo
