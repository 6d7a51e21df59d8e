// Chunked Mamba-3 SISO scan (docs/models.md#mamba-3): rotary angles by a cumulative sum, then the trapezoid folded
// into one scalar-decay chunked scan (runtime/retnet simple_gla_chunk) plus a diagonal correction (mamba3.h).
#include <cmath>

#include "runtime/kernels/precision.h"
#include "runtime/mamba3/mamba3.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

Mamba3Result mamba3_chunk(const Mamba3Inputs& in, const Mamba3State& s0, int64_t chunk_size) {
  check_mamba3_inputs("mamba3_chunk", in, s0);
  check_chunking("mamba3_chunk", in.q.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype({in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta, s0.h, s0.k_prev, s0.v_prev,
                                    s0.angle});
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2);
  auto opt = in.q.options().dtype(ct);
  auto v = in.v.to(ct), dt = in.dt.to(ct), lam = in.lambda.to(ct), a = in.a.to(ct);
  // φ_t = φ_{-1} + Σ_{r<=t} θ_r Δ_r (mod 2π).
  auto phi = torch::cumsum(in.theta.to(ct) * dt.unsqueeze(-1), 1);
  if (s0.angle.defined()) phi = phi + s0.angle.to(ct).unsqueeze(1);
  phi = mamba3_wrap_angle(phi);
  auto q = mamba3_rotate(in.q.to(ct), phi), k = mamba3_rotate(in.k.to(ct), phi);
  // b_t = (1 − λ_t) Δ_t, the trapezoid's weight on the previous token (β_t = α_t b_t); b_next_t = b_{t+1}, 0 at T−1.
  auto b = (1.0 - lam) * dt;
  auto b_next = torch::cat({b.narrow(1, 1, T - 1), torch::zeros({B, 1, H}, opt)}, 1);
  auto w = lam * dt + b_next;
  // Effective initial state h_{-1} + b_0 v_{-1} k̃_{-1}ᵀ, in the scan's [B, H, N, P] layout.
  torch::Tensor S0;
  if (s0.h.defined()) S0 = s0.h.to(ct);
  if (s0.k_prev.defined() && s0.v_prev.defined()) {
    auto carried = b.select(1, 0).unsqueeze(-1).unsqueeze(-1) *
                   (s0.v_prev.to(ct).unsqueeze(-1) * s0.k_prev.to(ct).unsqueeze(-2));
    S0 = S0.defined() ? S0 + carried : carried;
  }
  if (S0.defined()) S0 = S0.transpose(-1, -2);
  auto r = simple_gla_chunk(q, k, v * w.unsqueeze(-1), a, 1.0, S0, chunk_size);
  auto diagonal = (q * k).sum(-1) * b_next;  // the part of w_t that h_t does not hold yet
  auto y = r.o.to(ct) - diagonal.unsqueeze(-1) * v;
  Mamba3State out{r.final_state.transpose(-1, -2), k.select(1, T - 1), v.select(1, T - 1), phi.select(1, T - 1)};
  return {y.to(in.v.scalar_type()), out};
}

}  // namespace mnemo
