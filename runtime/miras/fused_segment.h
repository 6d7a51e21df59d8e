// One linear segment of the Miras channel-wise dual form (chunk.cpp dual_segment, factorised decays) as a single
// autograd node with a hand-written backward. The op-by-op form records ~70 small ops per segment and about twice as
// many backward nodes; at the benchmark shapes their dispatch, not the arithmetic, dominated Moneta / Yaad / Memora
// training, as it did for Titans (runtime/deep_memory/fused_chunk.h).
//
// Per head, tokens as rows (n tokens, d = d_h, hid = 4 d), anchor Â0 [hid, d], Â1 [d, hid], start weights W0, W1:
//   anchor pass  H0 = K Â0ᵀ, G0 = GELU(H0), U0 = G0 Â1ᵀ, N0 = LN(U0), E = K + N0 ⊙ γ + β - V, g_y = φ(E),
//                Gu = (γ g_y - mean(γ g_y) - N0 mean(γ g_y N0)) / s0,  Dl = (Gu Â1) ⊙ GELU'(H0)
//   decays       b = cumsum(log α), e^{±b};  K_η = K ⊙ η,  Gu_η = Gu ⊙ η
//   read-out     h = σ0 [(Q e^b) W0ᵀ - ((Q e^b)(K_η e^{-b})ᵀ ⊙ M) Dl],  a = GELU(h),
//                u = σ1 e^b ⊙ [a W1ᵀ - ((a G0ᵀ) ⊙ M)(Gu_η e^{-b})],  out = Q + LN(u) ⊙ γ + β
//   segment end  W0' = W0 ⊙ e^{b_n} (input axis) - Dlᵀ (K_η ⊙ e^{b_n - b}),  W1' = e^{b_n} ⊙ W1 (output axis) -
//                (Gu_η ⊙ e^{b_n - b})ᵀ G0
// φ: ℓ2 (identity), ℓp (p E (E² + ε)^{(p-2)/2}) or Huber (per-token switch on RMS(E) ≤ δ); σ0, σ1: Moneta's frozen
// ℓq scales (absent otherwise). tests/test_miras.cpp checks the node against the composed form in fp64 (outputs,
// end state, every gradient) and, through miras_chunk, against the token-by-token reference.
#pragma once
#include <torch/torch.h>

#include "runtime/deep_memory/memory.h"
#include "runtime/miras/miras.h"

namespace mnemo {

struct MirasSegmentInputs {
  torch::Tensor q, k, v;        // [B, H, n, d]
  torch::Tensor log_alpha, eta; // [B, H, n, G], G = d or 1
  torch::Tensor delta;          // [B, H, n] (Huber only; else undefined)
  torch::Tensor gamma, beta;    // LN affine, broadcastable [1, H, 1, d]
  MemoryWeights anchor, cur;    // {W_2 [B, H, hid, d], W_1 [B, H, d, hid]}; anchor already scaled by σ (Moneta)
  torch::Tensor scale0, scale1; // σ0, σ1 [B, H, 1, 1] (Moneta) or undefined
};

struct MirasSegmentOutput {
  torch::Tensor out;  // [B, H, n, d]
  MemoryWeights end;  // weights after the segment's last token
};

// o: the bias ("l2" | "lp" | "huber") with its constants and the memory's ln_eps, as miras_chunk checked them.
MirasSegmentOutput miras_fused_segment(const MirasSegmentInputs& in, const MirasOptions& o);

}  // namespace mnemo
