// TTT kernel internals (see ttt.h; docs/models.md#ttt): the prepared inputs and the pieces that the token-by-token
// form (naive.cpp) and the dual (chunked) form (chunk.cpp) share: preparation, the anchor gradients, the output
// function (prepare.cpp), and the token-by-token steps (naive.cpp) that the chunk form runs to finish a mini-batch.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/ttt/ttt.h"

namespace mnemo {
namespace ttt_detail {

struct Prepared {
  torch::Tensor q, k, v, row, col;  // [B, H, T, D] / [B, H, T]
  torch::Tensor ln_w, ln_b;         // [1, H, 1, D] (undefined without inner LN)
  TTTState state;                   // cast, acc filled with zeros when absent
  torch::ScalarType dtype;
};

// Checks the inputs (throws Error), casts to the compute dtype (fp64 if any input is), q scaled, [B, T, H, ·] ->
// [B, H, T, ·]; the state's accumulator zero-filled when absent.
Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& row,
                 const torch::Tensor& col, const torch::Tensor& ln_w, const torch::Tensor& ln_b,
                 const TTTState& st, const TTTOptions& opt);

TTTWeights zeros_like_weights(const TTTWeights& w);

struct AnchorPass {
  std::vector<torch::Tensor> X, E;  // per layer: inputs [B, H, c, in], errors ∂ℓ/∂Z_l [B, H, c, out]
};

// Forward of the key tokens through the anchor weights and the closed-form backward (prepare.cpp's header comment).
AnchorPass anchor_pass(const TTTWeights& w, const torch::Tensor& K, const torch::Tensor& V, const Prepared& p,
                       const TTTOptions& opt);

// The read-out of the inner model's output o_tilde for the queries q (inner LN, output residual).
torch::Tensor output_fn(const torch::Tensor& o_tilde, const torch::Tensor& q, const Prepared& p,
                        const TTTOptions& opt);

// Token-by-token from the prepared tensors, tokens [from, from + n) (naive.cpp).
TTTResult recurrent_impl(const Prepared& p, TTTState st, int64_t from, int64_t n, const TTTOptions& opt);

// o [B, H, T, D] -> [B, T, H, D] in v's dtype.
TTTResult finish(TTTResult r, const torch::Tensor& v);

}  // namespace ttt_detail
}  // namespace mnemo
