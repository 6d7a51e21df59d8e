// Mamba-3 SISO scan (docs/models.md#mamba-3; Lahoti et al., arXiv 2603.15569 §3: exponential-trapezoidal
// discretisation and a complex state as a data-dependent rotary embedding; fixture op `mamba3_siso`). Per batch b
// and head h, with α_t = exp(a_t) (a_t = A_t Δ_t <= 0), λ_t ∈ [0, 1] the trapezoid weight and Δ_t > 0:
//   φ_t = φ_{t-1} + θ_t Δ_t  (mod 2π)               rotation angles [R], R <= N/2
//   k̃_t = Rot(φ_t) k_t,  q̃_t = Rot(φ_t) q_t        Rot turns channel pairs (2i, 2i+1), i < R, by φ_t[i]
//   h_t = α_t h_{t-1} + β_t v_{t-1} k̃_{t-1}ᵀ + γ_t v_t k̃_tᵀ,   β_t = α_t (1 − λ_t) Δ_t,  γ_t = λ_t Δ_t
//   y_t = h_t q̃_t                                    (read after write; no D skip, no gate: the mixer adds them)
// λ = 1 is Mamba-2's Euler step with unrotated keys when θ = 0 (runtime/mamba2).
// Layout: q, k [B, T, H, N], v [B, T, H, P], a, dt, lambda [B, T, H], theta [B, T, H, R] (angular rates, already
// bounded by the caller). State (Mamba3State, any part undefined = zeros): h [B, H, P, N] (head dim first, as
// mamba_ssm), k_prev [B, H, N] (the previous token's rotated key), v_prev [B, H, P], angle [B, H, R]: O(1) in T.
// Both forms are plain autograd ops and compute in fp32, or fp64 when any input is fp64; y is returned in v's
// dtype, the state in the compute dtype.
#pragma once
#include <torch/torch.h>

#include "runtime/gla/gla.h"
#include "runtime/kernels/chunking.h"

namespace mnemo {

struct Mamba3State {
  torch::Tensor h, k_prev, v_prev, angle;
};

struct Mamba3Result {
  torch::Tensor o;     // [B, T, H, P]
  Mamba3State state;   // after the last token
};

struct Mamba3Inputs {
  torch::Tensor q, k, v, a, dt, lambda, theta;
};

// Token-by-token recurrence: O(T) sequential steps; T == 1 is the O(1) decode step.
Mamba3Result mamba3_recurrent(const Mamba3Inputs& in, const Mamba3State& initial = {});

// Chunked form: the trapezoid folded into one scalar-decay scan (runtime/retnet simple_gla_chunk). The pair
// (k̃_s, v_s) enters h_t (t > s) with weight (γ_s + (1 − λ_{s+1}) Δ_{s+1}) e^{a_{s+1} + .. + a_t} and h_s with γ_s, so
//   y_t = GLA(q̃, k̃, v ⊙ w, a)_t − (1 − λ_{t+1}) Δ_{t+1} (q̃_t · k̃_t) v_t,   w_s = γ_s + (1 − λ_{s+1}) Δ_{s+1},
// with λ_T, Δ_T of the token after the last taken as 0 and the initial state h_{-1} + (1 − λ_0) Δ_0 v_{-1} k̃_{-1}ᵀ.
// `route` picks the scan: the eager chunk form, or GLA's fused chunk kernels with the scalar gate (the mixer takes
// them on CUDA tensors: gla_chunk_route).
Mamba3Result mamba3_chunk(const Mamba3Inputs& in, const Mamba3State& initial = {}, int64_t chunk_size = 64,
                          GlaChunkRoute route = GlaChunkRoute::kEager);

// Packed sequences (docs/models.md#packed-sequences): in [1, N, ...] holds the sequences of cu_seqlens (int32 [S + 1])
// back to back, `positions` (int64 [N]) each token's index inside its own sequence. Each sequence from the initial
// state: the trapezoid's weight on the token after a sequence's last is 0, and the scan runs GLA's fused chunk kernels
// with those bounds (the angle a sequence starts from cancels in its outputs). Returns the outputs [1, N, H, P].
torch::Tensor mamba3_chunk_packed(const Mamba3Inputs& in, const torch::Tensor& positions,
                                  const torch::Tensor& cu_seqlens, int64_t chunk_size = 64);

// φ mod 2π into [0, 2π): keeps accumulated angles small in fp32 (the floor has zero gradient).
torch::Tensor mamba3_wrap_angle(const torch::Tensor& phi);

// Rot(φ) applied to x [B, T, H, N] with angles phi [B, T, H, R] (pairs 2i, 2i+1 for i < R; the rest unchanged).
torch::Tensor mamba3_rotate(const torch::Tensor& x, const torch::Tensor& phi);

// Shape and value-range checks shared by both forms; throw mnemo::Error naming the tensor.
void check_mamba3_inputs(const char* op, const Mamba3Inputs& in, const Mamba3State& initial);

// ---- MIMO (arXiv 2603.15569 §3; mamba_ssm's mamba3_mimo, fla's Mamba3 with is_mimo) ----
// Rank R: every token writes R key-value pairs and reads R queries against one state per head:
//   h_t = α_t h_{t-1} + β_t Σ_r v_{r,t-1} k̃_{r,t-1}ᵀ + γ_t Σ_r v_{r,t} k̃_{r,t}ᵀ,   y_{r,t} = h_t q̃_{r,t}
// with the SISO layer's α, β, γ and angles, and the rotation turning the channel pairs (i, i + N/2), i < A (the
// first and second halves of the state, as mamba_ssm's MIMO kernels do; SISO turns (2i, 2i+1)).
// Layout: q, k [B, T, R, H, N], v [B, T, R, H, P] (the caller's per-rank values), a, dt, lambda [B, T, H], theta
// [B, T, H, A]. State: h [B, H, P, N], k_prev [B, R, H, N], v_prev [B, R, H, P], angle [B, H, A]. y [B, T, R, H, P].
Mamba3Result mamba3_mimo_recurrent(const Mamba3Inputs& in, const Mamba3State& initial = {});
// Chunked: the trapezoid folded as in mamba3_chunk, the C tokens × R ranks of a chunk as one causal block (a key of
// token s is seen by every query of the tokens t >= s).
Mamba3Result mamba3_mimo_chunk(const Mamba3Inputs& in, const Mamba3State& initial = {}, int64_t chunk_size = 64);
// Rot(φ) on the halves: x [..., N] with angles phi [..., A] (broadcast), pairs (i, i + N/2) for i < A.
torch::Tensor mamba3_rotate_halves(const torch::Tensor& x, const torch::Tensor& phi);
void check_mamba3_mimo_inputs(const char* op, const Mamba3Inputs& in, const Mamba3State& initial);

class KernelOpRegistry;
// Adds the fixture op `mamba3_siso` (forms "recurrent", "chunk").
void register_mamba3_ops(KernelOpRegistry& r);

}  // namespace mnemo
