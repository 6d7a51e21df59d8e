// Lattice kernel internals (docs/models.md#lattice): the input checks and preparation, and the anchor gates of
// approximation (17) with the chunk-end renormalisation, shared by the token-by-token forms (naive.cpp) and the
// chunk form (chunk.cpp); defined in gates.cpp.
#pragma once
#include <torch/torch.h>

namespace mnemo {
namespace lattice_detail {

// Throws Error unless q, k [B,T,H,m], v [B,T,H,d], gamma, mu [B,T,H], S [B,H,m,d].
void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                  const torch::Tensor& mu, const torch::Tensor& S);

// Norms of the slots (rows) of S [B, H, m, d] -> [B, H, m].
torch::Tensor slot_norm(const torch::Tensor& S);

// Gates of approximation (17) for a segment of L tokens from the anchor S0 (docs/models.md#lattice, corrections docs/models.md#lattice.1–2).
// Inputs in [B, H, L, *] layout; returns h [B,H,L,d], g and w [B,H,L,m].
struct Gates {
  torch::Tensor h, g, w;
};
Gates anchor_gates(const torch::Tensor& S0, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& ga,
                   const torch::Tensor& mu, bool dec);

// Rescale every slot of S to the norm of the matching slot of S0 (chunk-end decision, docs/models.md#lattice).
torch::Tensor renormalise(const torch::Tensor& S, const torch::Tensor& S0);

// The inputs in the recurrence dtype, [B, T, H, ·] -> [B, H, T, ·].
struct Prepared {
  torch::Tensor q, k, v, ga, mu;  // [B, H, T, *] / [B, H, T]
  torch::ScalarType dt;
};
Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                 const torch::Tensor& mu);

}  // namespace lattice_detail
}  // namespace mnemo
