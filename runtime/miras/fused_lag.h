// Memora's lag token (miras.h, retention "kl"; docs/models.md#memora) as one autograd node with a hand-written backward.
// The op-by-op step records ~60 small ops and about twice as many backward nodes for a single token; with one lag
// token per chunk their dispatch cost Memora a third of its training step.
//
// Per head, the token's rows k, v, q [1, d], weights W0 = W_2 [hid, d], W1 = W_1 [d, hid], gates a = e^{log α},
// η [1, G] (G = d or 1):
//   anchor pass at W (anchor_pass.h): Dl [1, hid], Gu [1, d], G0 [1, hid]; ∇W0 = Dlᵀ k, ∇W1 = Guᵀ G0
//   W0' = softmax_row(a ⊙ log max(W0, floor) - η ⊙ Dlᵀ k)          (gates on the input axis: columns)
//   W1' = softmax_row(aᵀ ⊙ log max(W1, floor) - ηᵀ ⊙ Guᵀ G0)        (gates on the output axis: rows)
//   read  out = q + LN(W1' GELU(W0' q)) ⊙ γ + β
// tests/test_miras.cpp checks it, through miras_chunk, against the op-by-op step in fp64 (outputs, state, every
// gradient) and against the token-by-token reference.
#pragma once
#include <torch/torch.h>

#include "runtime/deep_memory/memory.h"
#include "runtime/miras/miras.h"

namespace mnemo {

struct MirasLagInputs {
  torch::Tensor q, k, v;         // [B, H, 1, d]
  torch::Tensor log_alpha, eta;  // [B, H, 1, G]
  torch::Tensor delta;           // [B, H, 1] (Huber only; else undefined)
  torch::Tensor gamma, beta;     // LN affine, broadcastable [1, H, 1, d]
  MemoryWeights cur;             // {W_2 [B, H, hid, d], W_1 [B, H, d, hid]} before the token
};

struct MirasLagOutput {
  torch::Tensor out;   // [B, H, 1, d]
  MemoryWeights next;  // the weights after the token (the anchor of the rest of the chunk)
};

// o: the bias with its constants, ln_eps and kl_floor, as miras_chunk checked them.
MirasLagOutput miras_fused_lag(const MirasLagInputs& in, const MirasOptions& o);

}  // namespace mnemo
