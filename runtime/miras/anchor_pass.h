// The Miras "anchor pass": the rank-1 terms of the inner gradient of the attentional bias at anchor weights Â, for
// rows of tokens, with its hand-written adjoint. Shared by the two fused nodes (fused_segment.h: the dual-form
// segment; fused_lag.h: Memora's lag token).
//
// Per head, tokens as rows, Â0 [hid, d] (W_2), Â1 [d, hid] (W_1):
//   H0 = K Â0ᵀ, G0 = GELU(H0), U0 = G0 Â1ᵀ, N0 = LN(U0) (scale s0), E = K + N0 ⊙ γ + β - V, g_y = φ(E),
//   Gu = (γ g_y - mean(γ g_y) - N0 mean(γ g_y N0)) / s0,  R = Gu Â1,  Dl = R ⊙ GELU'(H0)
// so ∇_{W_2} ℓ = Dl_tᵀ K_t and ∇_{W_1} ℓ = Gu_tᵀ G0_t per token t (memory.h memory_grad_terms: cols Dl, Gu; rows
// K, G0). φ: ℓ2, ℓp or Huber (miras.h miras_bias_gradient).
#pragma once
#include <torch/torch.h>

#include "runtime/miras/miras.h"

namespace mnemo::miras_node {

struct AnchorPass {
  torch::Tensor G0, P0, P0d, N0, s0, E, Gy, Gu, R, Dl, hub;  // P0, P0d: GELU', GELU'' at H0; hub: Huber's switch
  std::vector<torch::Tensor> saved() const { return {G0, P0, P0d, N0, s0, E, Gy, Gu, R, Dl, hub}; }
  static AnchorPass from_saved(const std::vector<torch::Tensor>& s, size_t at);  // s[at .. at+10]
  static constexpr size_t kSaved = 11;
};

// k, v [B, H, n, d]; delta [B, H, n] (Huber) or empty; gam, bet [1, H, 1, d]; an0, an1 the anchor weights.
AnchorPass anchor_forward(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& delta,
                          const torch::Tensor& gam, const torch::Tensor& bet, const torch::Tensor& an0,
                          const torch::Tensor& an1, const MirasOptions& o);

// Gradients reaching the pass's inputs; gam and bet are head sums [1, H, 1, d] (the caller adds its own paths and
// reduces to the parameters' shapes); an0, an1 keep the batch axis; delta is undefined unless the bias is Huber.
struct AnchorGrads {
  torch::Tensor k, v, delta, gam, bet, an0, an1;
};
// gDl, gGu, gG0: the adjoints of Dl, Gu and G0 from the rest of the node.
AnchorGrads anchor_backward(const AnchorPass& f, const torch::Tensor& k, const torch::Tensor& delta,
                            const torch::Tensor& gam, const torch::Tensor& an0, const torch::Tensor& an1,
                            const torch::Tensor& gDl, const torch::Tensor& gGu, const torch::Tensor& gG0,
                            const MirasOptions& o);

// Gradient of a [B, H, n, G] gate (G = d: channel-wise, G = 1: per head) from a [B, H, n, d] one.
inline torch::Tensor to_gate(const torch::Tensor& g, int64_t G) { return G == 1 ? g.sum(-1, true) : g; }

// The options the pass and its adjoint read (bias, p, lp_eps, huber_eps, ln_eps), kept in and read back from a
// node's saved data.
void save_bias_options(torch::autograd::AutogradContext* ctx, const MirasOptions& o);
MirasOptions load_bias_options(torch::autograd::AutogradContext* ctx);

}  // namespace mnemo::miras_node
