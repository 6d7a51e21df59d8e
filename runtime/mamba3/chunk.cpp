// Chunked Mamba-3 SISO scan (docs/models.md#mamba-3): rotary angles by a cumulative sum, then the trapezoid folded
// into one scalar-decay chunked scan (runtime/retnet simple_gla_chunk, or GLA's fused chunk kernels) plus a diagonal
// correction (mamba3.h).
#include <cmath>

#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/mamba3/mamba3.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

Mamba3Result mamba3_chunk(const Mamba3Inputs& in, const Mamba3State& s0, int64_t chunk_size, GlaChunkRoute route) {
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
  auto r = route == GlaChunkRoute::kFusedKernel
               ? gla_chunk_fused(q, k, v * w.unsqueeze(-1), a, GlaGate::kScalar, 1.0, S0, chunk_size)
               : simple_gla_chunk(q, k, v * w.unsqueeze(-1), a, 1.0, S0, chunk_size);
  auto diagonal = (q * k).sum(-1) * b_next;  // the part of w_t that h_t does not hold yet
  auto y = r.o.to(ct) - diagonal.unsqueeze(-1) * v;
  Mamba3State out{r.final_state.transpose(-1, -2), k.select(1, T - 1), v.select(1, T - 1), phi.select(1, T - 1)};
  return {y.to(in.v.scalar_type()), out};
}

torch::Tensor mamba3_chunk_packed(const Mamba3Inputs& in, const torch::Tensor& positions,
                                  const torch::Tensor& cu_seqlens, int64_t chunk_size) {
  check_mamba3_inputs("mamba3_chunk_packed", in, {});
  check_chunking("mamba3_chunk_packed", in.q.size(1), chunk_size);
  if (in.q.size(0) != 1)
    throw Error("mamba3_chunk_packed: packed sequences are one row (B = 1), got B = " + std::to_string(in.q.size(0)));
  const int64_t N = in.q.size(1);
  check_shape("mamba3_chunk_packed", "positions", positions, {N});
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto ct = recurrence_dtype({in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta});
  auto v = in.v.to(ct), dt = in.dt.to(ct), lam = in.lambda.to(ct), a = in.a.to(ct);
  auto pos = positions.to(torch::kLong);
  // The angles run on across the row: a sequence's outputs see only φ_t − φ_s of its own tokens (q̃_t · k̃_s =
  // q_t Rot(φ_s − φ_t) k_s), so the angle a sequence starts from, the same for all its tokens, cancels.
  auto phi = mamba3_wrap_angle(torch::cumsum(in.theta.to(ct) * dt.unsqueeze(-1), 1));  // [1, N, H, R]
  auto q = mamba3_rotate(in.q.to(ct), phi), k = mamba3_rotate(in.k.to(ct), phi);
  // b_next_t = b_{t+1}, 0 where t is its sequence's last token (the next token starts another sequence, or none).
  auto b = (1.0 - lam) * dt;
  auto next_starts = torch::cat({pos.narrow(0, 1, N - 1) == 0, torch::ones({1}, pos.options().dtype(torch::kBool))});
  auto b_next = torch::cat({b.narrow(1, 1, N - 1), torch::zeros_like(b.narrow(1, 0, 1))}, 1) *
                next_starts.logical_not().to(ct).view({1, N, 1});
  auto w = lam * dt + b_next;
  auto r = gla_chunk_fused(q, k, v * w.unsqueeze(-1), a, GlaGate::kScalar, 1.0, {}, chunk_size, cu_seqlens);
  auto y = r.o.to(ct) - ((q * k).sum(-1) * b_next).unsqueeze(-1) * v;
  return y.to(in.v.scalar_type());
}

Mamba3Result mamba3_mimo_chunk(const Mamba3Inputs& in, const Mamba3State& s0, int64_t chunk_size) {
  check_mamba3_mimo_inputs("mamba3_mimo_chunk", in, s0);
  check_chunking("mamba3_mimo_chunk", in.q.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto ct = recurrence_dtype({in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta, s0.h, s0.k_prev, s0.v_prev,
                                    s0.angle});
  const int64_t B = in.q.size(0), T = in.q.size(1), R = in.q.size(2), H = in.q.size(3), N = in.q.size(4);
  const int64_t P = in.v.size(4);
  auto opt = in.q.options().dtype(ct);
  auto v = in.v.to(ct), dt = in.dt.to(ct), lam = in.lambda.to(ct), a = in.a.to(ct);
  auto phi = torch::cumsum(in.theta.to(ct) * dt.unsqueeze(-1), 1);  // [B, T, H, A]
  if (s0.angle.defined()) phi = phi + s0.angle.to(ct).unsqueeze(1);
  phi = mamba3_wrap_angle(phi);
  auto q = mamba3_rotate_halves(in.q.to(ct), phi.unsqueeze(2)), k = mamba3_rotate_halves(in.k.to(ct), phi.unsqueeze(2));
  // The trapezoid as in mamba3_chunk: a value v_t enters the state with weight w_t = γ_t + b_{t+1} (γ_t = λ_t Δ_t),
  // and the output of its own token with γ_t alone (h_t does not hold b_{t+1}'s part yet). Both weights go on the
  // keys' side here: w on the chunk's writes, and within a chunk's causal block w for earlier tokens and γ for the
  // token itself, so no separate same-token correction is needed.
  auto b = (1.0 - lam) * dt;
  auto b_next = torch::cat({b.narrow(1, 1, T - 1), torch::zeros({B, 1, H}, opt)}, 1);
  auto w = lam * dt + b_next;  // [B, T, H]
  // The scan's state in key x value layout [B, H, N, P]: h_{-1} + b_0 Σ_r v_{r,-1} k̃_{r,-1}ᵀ.
  auto S = s0.h.defined() ? s0.h.to(ct).transpose(-1, -2) : torch::zeros({B, H, N, P}, opt);
  if (s0.k_prev.defined() && s0.v_prev.defined())
    S = S + b.select(1, 0).unsqueeze(-1).unsqueeze(-1) *
                torch::einsum("brhn,brhp->bhnp", {s0.k_prev.to(ct), s0.v_prev.to(ct)});
  // Chunks of C tokens, padded at the end with q = k = v = 0 and a = w = 0 (no write, no decay); within a chunk the
  // (rank, token) pairs flatten rank-major: [B, H, NC, R·C, ·], so that the decay between tokens, shared by every
  // pair of ranks, broadcasts over whole rows of C (a token-major order broadcasts it over runs of R). Every chunk's
  // causal block at once, then the states at the chunk starts by one short sequential pass, then every chunk's read
  // of its start state at once.
  const int64_t C = std::min(chunk_size, T), NC = (T + C - 1) / C, pad = NC * C - T;
  auto blocks = [&](const torch::Tensor& x) {  // [B, T, R, H, X] -> [B, H, NC, R·C, X]
    auto y = x.permute({0, 3, 1, 2, 4});        // [B, H, T, R, X]
    if (pad > 0) y = torch::constant_pad_nd(y, {0, 0, 0, 0, 0, pad});
    return y.reshape({B, H, NC, C, R, y.size(-1)}).transpose(3, 4).reshape({B, H, NC, R * C, y.size(-1)});
  };
  auto per_token = [&](const torch::Tensor& x) {  // [B, T, H] -> [B, H, NC, C]
    auto y = x.permute({0, 2, 1});
    if (pad > 0) y = torch::constant_pad_nd(y, {0, pad});
    return y.reshape({B, H, NC, C});
  };
  auto per_pair = [&](const torch::Tensor& x) {  // [B, H, NC, C] -> [B, H, NC, R·C], the same for every rank
    return x.unsqueeze(3).expand({B, H, NC, R, C}).reshape({B, H, NC, R * C});
  };
  auto qc = blocks(q), kc = blocks(k), vc = blocks(v);
  auto g = torch::cumsum(per_token(a), -1);  // log decay from each chunk's start
  auto gq = per_pair(g);                      // per (rank, token)
  auto wc = per_token(w);
  // The weight of key token s in query token t's output [C, C] (causal: t >= s), shared by every pair of ranks:
  // exp(g_t − g_s) w_s for s < t, and γ_t = w_t − b_{t+1} for s = t (exp(0) = 1 on the diagonal).
  auto causal = torch::ones({C, C}, torch::TensorOptions().dtype(torch::kBool).device(in.q.device())).tril();
  auto weight = (g.unsqueeze(-1) - g.unsqueeze(-2)).masked_fill(causal.logical_not(), -INFINITY).exp() *
                    wc.unsqueeze(-2) -
                torch::diag_embed(per_token(b_next));
  auto scores = torch::matmul(qc, kc.transpose(-1, -2)).view({B, H, NC, R, C, R, C}) *
                weight.view({B, H, NC, 1, C, 1, C});
  auto o = torch::matmul(scores.view({B, H, NC, R * C, R * C}), vc);  // within each chunk
  auto g_last = g.select(-1, C - 1);                                              // [B, H, NC]
  auto writes =
      torch::matmul((kc * ((g_last.unsqueeze(-1) - gq).exp() * per_pair(wc)).unsqueeze(-1)).transpose(-1, -2), vc);
  std::vector<torch::Tensor> starts;  // the state at each chunk's start [B, H, N, P]
  starts.reserve(NC);
  // unbind, not select(c) in the loop: the backward of NC selects writes NC zero-filled full-size gradients.
  const auto decay_c = g_last.exp().unsqueeze(-1).unsqueeze(-1).unbind(2), writes_c = writes.unbind(2);
  for (int64_t c = 0; c < NC; ++c) {
    starts.push_back(S);
    S = decay_c[static_cast<size_t>(c)] * S + writes_c[static_cast<size_t>(c)];
  }
  o = o + torch::matmul(qc * gq.exp().unsqueeze(-1), torch::stack(starts, 2));
  // [B, H, NC, R, C, P] -> [B, T, R, H, P]
  auto y = o.view({B, H, NC, R, C, P}).permute({0, 2, 4, 3, 1, 5}).reshape({B, NC * C, R, H, P}).narrow(1, 0, T);
  Mamba3State out{S.transpose(-1, -2), k.select(1, T - 1), v.select(1, T - 1), phi.select(1, T - 1)};
  return {y.to(in.v.scalar_type()), out};
}

}  // namespace mnemo
