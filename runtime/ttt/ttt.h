// TTT-Linear / TTT-MLP kernels (docs/models.md#ttt, docs/models.md#deep-memory "MLP + LN" row; fixture op `ttt_linear`).
//
// Inner model per head, row-vector storage (z = x W + b, W [in, out]):
//   linear: f_res(x) = x W_1 + b_1                                  (1 layer, D -> D)
//   mlp:    f_res(x) = GELU(x W_1 + b_1) W_2 + b_2                  (2 layers, D -> 4D -> D)
//   inner loss  ℓ_s = ½ || LN(f_res(k_s)) ⊙ w + b_ln - (v_s - k_s) ||²   (LN eps `eps`, affine outer)
//   output      o_t = r_t + LN(f_res(q̃_t; W_t)) ⊙ w + b_ln,   q̃ = scale · q,
//               r_t = q̃_t (spec: f(z) = z + LN(f_res(z))) or r_t = f_res(q̃_t; W_t) (fla, `residual_inner`).
// Mini-batch GD (docs/models.md#conventions): the sequence is cut into mini-batches of `mini_batch` tokens aligned to
// absolute positions; inside a mini-batch every gradient is taken at the anchor W' (the weights at
// the mini-batch start) and the per-token weights are
//   W_t = W' - Σ_{s ≤ t, s in the mini-batch} C[t, s] ∇ℓ_s(W'),     C[t, s] = row_t · col_s
// (a separable lower-triangular coefficient matrix: it makes the decode state constant-size, an
// accumulator Σ col_s ∇ℓ_s). The anchor of the next mini-batch is W at the mini-batch's last token.
//   fla (fixture):      row_t = η_t (the query token's η), col_s = 1; the end-of-batch update then
//                       uses η of the last token, as in fla's chunk_ttt_linear_ref.
//   ttt-lm-pytorch:     row_t = 1 / t_local (t_local = 1..b inside the mini-batch), col_s = η_s with
//                       η_s = (η_base/d_h) σ(θ_lr · x_s)   (the mixers' default).
// Forms: `ttt_chunk` is the dual form of docs/models.md#deep-memory (two masked b×b matmuls per layer, no per-token weight
// materialisation); `ttt_recurrent` is the token-by-token reference that materialises W_t. Both are
// plain differentiable tensor ops (autograd reaches q, k, v, row, col, LN params, initial weights),
// compute in fp32 (fp64 when any input is fp64) and return o in v's dtype.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

namespace mnemo {

// Inner weights, one entry per layer: W[l] [B, H, in_l, out_l], b[l] [B, H, 1, out_l] (b empty: no
// inner biases).
struct TTTWeights {
  std::vector<torch::Tensor> W, b;
};

// Constant-size carry between calls (decode state): the anchor weights of the current mini-batch,
// the accumulator Σ_{s so far} col_s ∇ℓ_s(anchor) (same shapes as the weights), and how many tokens
// of the current mini-batch have been consumed (0 .. mini_batch-1).
struct TTTState {
  TTTWeights anchor, acc;
  int64_t pos = 0;
  bool defined() const { return !anchor.W.empty(); }
};

struct TTTOptions {
  int64_t mini_batch = 16;
  double eps = 1e-6;             // inner LayerNorm eps
  double scale = 1.0;            // q̃ = scale · q
  // Output residual r_t: "query" (o = q̃ + N(õ) = f(q̃), spec), "inner" (o = õ + N(õ), fla), "none" (o = N(õ)),
  // õ = f_res(q̃; W_t), N = LN·w + b_ln (identity without inner LN).
  std::string output_residual = "query";
  bool inner_ln = true;  // false: N = identity (used for the delta-rule reduction)
  bool skip = true;      // inner model f(z) = z + N(f_res(z)): loss target v - k; false: target v
};

struct TTTResult {
  torch::Tensor o;       // [B, T, H, D]
  TTTWeights final;      // weights at the last token (W' - row_last · acc)
  TTTState carry;        // state to continue from (anchor, accumulator, position in mini-batch)
};

// q, k, v [B, T, H, D]; row, col [B, T, H]; ln_w, ln_b [H, D]; state: initial (pos 0, zero acc
// when acc is empty). A state with pos > 0 is continued token by token up to the next boundary.
TTTResult ttt_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                    const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt);
TTTResult ttt_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                        const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt);

// ttt_chunk runs each mini-batch of the 2-layer MLP with biases and inner LN as one fused autograd node
// (runtime/ttt/fused_chunk.cpp); ttt_chunk_composed runs it op by op under autograd (the reference for that node's
// hand-written backward; every configuration).
TTTResult ttt_chunk_composed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                             const torch::Tensor& ln_b, const TTTState& state, const TTTOptions& opt);
struct TTTFusedChunk {
  torch::Tensor o;  // [B, H, c, D]
  TTTWeights acc;   // Σ_s col_s ∇ℓ_s(anchor) of the mini-batch
};
bool ttt_fused_chunk_supported(const TTTWeights& anchor, const TTTOptions& opt);
// One mini-batch, inputs in the kernel's prepared layout: q (scaled), k, v [B, H, c, D]; row, col [B, H, c];
// ln_w, ln_b [1, H, 1, D]; the anchor weights.
TTTFusedChunk ttt_mlp_chunk_fused(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& row, const torch::Tensor& col, const torch::Tensor& ln_w,
                                  const torch::Tensor& ln_b, const TTTWeights& anchor, const TTTOptions& opt);

// Exact GELU (backward by elementwise ops, defined in prepare.cpp) and its derivative (Φ(h) + h φ(h)).
torch::Tensor ttt_gelu(const torch::Tensor& h);
torch::Tensor ttt_gelu_grad(const torch::Tensor& h);

}  // namespace mnemo
