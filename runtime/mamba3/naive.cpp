// Token-by-token Mamba-3 SISO recurrence (docs/models.md#mamba-3; arXiv 2603.15569 §3), the reference the
// chunked form is tested against and the O(1) decode step (T == 1).
#include <cmath>

#include "runtime/kernels/precision.h"
#include "runtime/mamba3/mamba3.h"

namespace mnemo {

void check_mamba3_inputs(const char* op, const Mamba3Inputs& in, const Mamba3State& s0) {
  check_shape(op, "q", in.q, {-1, -1, -1, -1});
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), N = in.q.size(3);
  check_shape(op, "k", in.k, {B, T, H, N});
  check_shape(op, "v", in.v, {B, T, H, -1});
  const int64_t P = in.v.size(3);
  check_shape(op, "a", in.a, {B, T, H});
  check_shape(op, "dt", in.dt, {B, T, H});
  check_shape(op, "lambda", in.lambda, {B, T, H});
  check_shape(op, "theta", in.theta, {B, T, H, -1});
  const int64_t R = in.theta.size(3);
  if (2 * R > N)
    throw Error(std::string(op) + ": theta has " + std::to_string(R) + " angles but q/k have only " +
                std::to_string(N) + " channels (need 2 * angles <= channels)");
  if (s0.h.defined()) check_shape(op, "initial h", s0.h, {B, H, P, N});
  if (s0.k_prev.defined()) check_shape(op, "initial k_prev", s0.k_prev, {B, H, N});
  if (s0.v_prev.defined()) check_shape(op, "initial v_prev", s0.v_prev, {B, H, P});
  if (s0.angle.defined()) check_shape(op, "initial angle", s0.angle, {B, H, R});
  check_chunking(op, T, 1);
}

torch::Tensor mamba3_rotate(const torch::Tensor& x, const torch::Tensor& phi) {
  const int64_t N = x.size(-1), R = phi.size(-1);
  if (R == 0) return x;
  auto shape = x.sizes().vec();
  shape.back() = R;
  shape.push_back(2);
  auto pairs = x.narrow(-1, 0, 2 * R).reshape(shape);
  auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  auto c = torch::cos(phi), s = torch::sin(phi);
  auto rotated = torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).flatten(-2);
  if (2 * R == N) return rotated;
  return torch::cat({rotated, x.narrow(-1, 2 * R, N - 2 * R)}, -1);
}

torch::Tensor mamba3_wrap_angle(const torch::Tensor& phi) {
  constexpr double two_pi = 2.0 * M_PI;
  return phi - two_pi * torch::floor(phi / two_pi);
}

Mamba3Result mamba3_recurrent(const Mamba3Inputs& in, const Mamba3State& s0) {
  check_mamba3_inputs("mamba3_recurrent", in, s0);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype({in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta, s0.h, s0.k_prev, s0.v_prev,
                                    s0.angle});
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), N = in.q.size(3), P = in.v.size(3);
  const int64_t R = in.theta.size(3);
  auto opt = in.q.options().dtype(ct);
  auto q = in.q.to(ct), k = in.k.to(ct), v = in.v.to(ct);
  auto alpha = in.a.to(ct).exp(), dt = in.dt.to(ct), lam = in.lambda.to(ct);
  auto beta = alpha * (1.0 - lam) * dt, gamma = lam * dt;  // [B, T, H]
  auto dphi = in.theta.to(ct) * dt.unsqueeze(-1);           // [B, T, H, R]
  auto h = s0.h.defined() ? s0.h.to(ct) : torch::zeros({B, H, P, N}, opt);
  auto k_prev = s0.k_prev.defined() ? s0.k_prev.to(ct) : torch::zeros({B, H, N}, opt);
  auto v_prev = s0.v_prev.defined() ? s0.v_prev.to(ct) : torch::zeros({B, H, P}, opt);
  auto phi = s0.angle.defined() ? s0.angle.to(ct) : torch::zeros({B, H, R}, opt);
  auto outer = [](const torch::Tensor& vv, const torch::Tensor& kk) { return vv.unsqueeze(-1) * kk.unsqueeze(-2); };
  auto per_head = [](const torch::Tensor& c) { return c.unsqueeze(-1).unsqueeze(-1); };  // [B, H] -> [B, H, 1, 1]
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    phi = mamba3_wrap_angle(phi + dphi.select(1, t));
    auto q_t = mamba3_rotate(q.select(1, t), phi), k_t = mamba3_rotate(k.select(1, t), phi);
    auto v_t = v.select(1, t);
    h = per_head(alpha.select(1, t)) * h + per_head(beta.select(1, t)) * outer(v_prev, k_prev) +
        per_head(gamma.select(1, t)) * outer(v_t, k_t);
    outs.push_back(torch::matmul(h, q_t.unsqueeze(-1)).squeeze(-1));  // [B, H, P]
    k_prev = k_t;
    v_prev = v_t;
  }
  return {torch::stack(outs, 1).to(in.v.scalar_type()), {h, k_prev, v_prev, phi}};
}

void check_mamba3_mimo_inputs(const char* op, const Mamba3Inputs& in, const Mamba3State& s0) {
  check_shape(op, "q", in.q, {-1, -1, -1, -1, -1});
  const int64_t B = in.q.size(0), T = in.q.size(1), R = in.q.size(2), H = in.q.size(3), N = in.q.size(4);
  check_shape(op, "k", in.k, {B, T, R, H, N});
  check_shape(op, "v", in.v, {B, T, R, H, -1});
  const int64_t P = in.v.size(4);
  check_shape(op, "a", in.a, {B, T, H});
  check_shape(op, "dt", in.dt, {B, T, H});
  check_shape(op, "lambda", in.lambda, {B, T, H});
  check_shape(op, "theta", in.theta, {B, T, H, -1});
  const int64_t A = in.theta.size(3);
  if (N % 2 != 0 || 2 * A > N)
    throw Error(std::string(op) + ": theta has " + std::to_string(A) + " angles for " + std::to_string(N) +
                " channels (need an even channel count and 2 * angles <= channels)");
  if (s0.h.defined()) check_shape(op, "initial h", s0.h, {B, H, P, N});
  if (s0.k_prev.defined()) check_shape(op, "initial k_prev", s0.k_prev, {B, R, H, N});
  if (s0.v_prev.defined()) check_shape(op, "initial v_prev", s0.v_prev, {B, R, H, P});
  if (s0.angle.defined()) check_shape(op, "initial angle", s0.angle, {B, H, A});
  check_chunking(op, T, 1);
}

torch::Tensor mamba3_rotate_halves(const torch::Tensor& x, const torch::Tensor& phi) {
  const int64_t N = x.size(-1), A = phi.size(-1), half = N / 2;
  if (A == 0) return x;
  auto x0 = x.narrow(-1, 0, A), x1 = x.narrow(-1, half, A);
  auto c = torch::cos(phi), s = torch::sin(phi);
  auto r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
  if (A == half) return torch::cat({r0, r1}, -1);
  return torch::cat({r0, x.narrow(-1, A, half - A), r1, x.narrow(-1, half + A, N - half - A)}, -1);
}

Mamba3Result mamba3_mimo_recurrent(const Mamba3Inputs& in, const Mamba3State& s0) {
  check_mamba3_mimo_inputs("mamba3_mimo_recurrent", in, s0);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto ct = recurrence_dtype({in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta, s0.h, s0.k_prev, s0.v_prev,
                                    s0.angle});
  const int64_t B = in.q.size(0), T = in.q.size(1), R = in.q.size(2), H = in.q.size(3), N = in.q.size(4);
  const int64_t P = in.v.size(4), A = in.theta.size(3);
  auto opt = in.q.options().dtype(ct);
  auto q = in.q.to(ct), k = in.k.to(ct), v = in.v.to(ct);
  auto alpha = in.a.to(ct).exp(), dt = in.dt.to(ct), lam = in.lambda.to(ct);
  auto beta = alpha * (1.0 - lam) * dt, gamma = lam * dt;  // [B, T, H]
  auto dphi = in.theta.to(ct) * dt.unsqueeze(-1);           // [B, T, H, A]
  auto h = s0.h.defined() ? s0.h.to(ct) : torch::zeros({B, H, P, N}, opt);
  auto k_prev = s0.k_prev.defined() ? s0.k_prev.to(ct) : torch::zeros({B, R, H, N}, opt);
  auto v_prev = s0.v_prev.defined() ? s0.v_prev.to(ct) : torch::zeros({B, R, H, P}, opt);
  auto phi = s0.angle.defined() ? s0.angle.to(ct) : torch::zeros({B, H, A}, opt);
  // Σ_r v_r k_rᵀ: [B, R, H, P] x [B, R, H, N] -> [B, H, P, N].
  auto writes = [](const torch::Tensor& vv, const torch::Tensor& kk) { return torch::einsum("brhp,brhn->bhpn", {vv, kk}); };
  auto per_head = [](const torch::Tensor& c) { return c.unsqueeze(-1).unsqueeze(-1); };  // [B, H] -> [B, H, 1, 1]
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    phi = mamba3_wrap_angle(phi + dphi.select(1, t));
    auto q_t = mamba3_rotate_halves(q.select(1, t), phi.unsqueeze(1));  // every rank turned by the head's angles
    auto k_t = mamba3_rotate_halves(k.select(1, t), phi.unsqueeze(1));
    auto v_t = v.select(1, t);
    h = per_head(alpha.select(1, t)) * h + per_head(beta.select(1, t)) * writes(v_prev, k_prev) +
        per_head(gamma.select(1, t)) * writes(v_t, k_t);
    outs.push_back(torch::einsum("bhpn,brhn->brhp", {h, q_t}));  // [B, R, H, P]
    k_prev = k_t;
    v_prev = v_t;
  }
  return {torch::stack(outs, 1).to(in.v.scalar_type()), {h, k_prev, v_prev, phi}};
}

}  // namespace mnemo
