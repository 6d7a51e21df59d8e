// Chunked selective scan (docs/models.md#mamba): the elementwise linear recurrence by recursive doubling within
// chunks and a carry across them, as one autograd node.
#include <algorithm>

#include "runtime/kernels/precision.h"
#include "runtime/mamba/selective_scan.h"

namespace mnemo {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// h_t = a_t ⊙ h_{t-1} + b_t over dim 1 of a, b [B, T, F] from h0 [B, F]; no autograd. In each chunk of C steps,
// round k combines every position t >= k with the one k steps earlier (Hillis–Steele): (a_t, b_t) ← (a_t a_{t−k},
// b_t + a_t b_{t−k}), so after log2(C) rounds b_t is the chunk's state from a zero start and a_t the product of its
// decays; then h = b + a ⊙ (state at the end of the previous chunk), chunk by chunk.
torch::Tensor scan_forward(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& h0, int64_t chunk) {
  const int64_t Bn = a.size(0), T = a.size(1), F = a.size(2);
  const int64_t C = std::min(chunk, T), n = (T + C - 1) / C, padded = n * C;
  // Zero decays and inputs after the last step: they change no state that is returned.
  auto padded_copy = [&](const torch::Tensor& t) {
    return padded == T ? t.clone() : torch::constant_pad_nd(t, {0, 0, 0, padded - T});
  };
  auto P = padded_copy(a).view({Bn, n, C, F});  // products of decays within the chunk
  auto H = padded_copy(b).view({Bn, n, C, F});  // states within the chunk from a zero start
  for (int64_t k = 1; k < C; k *= 2) {
    auto later_P = P.narrow(2, k, C - k), earlier_P = P.narrow(2, 0, C - k);
    H.narrow(2, k, C - k).add_(later_P * H.narrow(2, 0, C - k));  // the product is formed before the add
    later_P.copy_(later_P * earlier_P);
  }
  torch::Tensor carry = h0;
  for (int64_t i = 0; i < n; ++i) {
    auto Hi = H.select(1, i);
    Hi.add_(P.select(1, i) * carry.unsqueeze(1));
    carry = Hi.select(1, C - 1);
  }
  auto h = H.view({Bn, padded, F});
  return padded == T ? h : h.narrow(1, 0, T).contiguous();
}

struct LinearScanFn : torch::autograd::Function<LinearScanFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& h0, int64_t chunk) {
    auto h = scan_forward(a, b, h0, chunk);
    ctx->save_for_backward({a, h, h0});
    ctx->saved_data["chunk"] = chunk;
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto &a = saved[0], &h = saved[1], &h0 = saved[2];
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), T = a.size(1);
    const auto gh = grad_out[0].defined() ? grad_out[0] : torch::zeros_like(h);
    // g_t = ∂L/∂h_t + a_{t+1} g_{t+1}: the forward scan on time-reversed inputs, with no decay past the last step.
    auto a_next = torch::cat({a.narrow(1, 1, T - 1), torch::zeros_like(a.narrow(1, 0, 1))}, 1);
    auto g = scan_forward(a_next.flip(1), gh.flip(1), torch::zeros_like(h0), chunk).flip(1);
    auto h_prev = torch::cat({h0.unsqueeze(1), h.narrow(1, 0, T - 1)}, 1);
    return {g * h_prev, g, a.select(1, 0) * g.select(1, 0), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_scan_chunked(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& h0,
                                  int64_t chunk_size) {
  check_chunking("linear_scan_chunked", a.size(1), chunk_size);
  check_shape("linear_scan_chunked", "b", b, a.sizes().vec());
  const int64_t Bn = a.size(0), T = a.size(1);
  auto flat = [&](const torch::Tensor& t) { return t.reshape({Bn, T, -1}); };
  const int64_t F = flat(a).size(2);
  auto start = h0.defined() ? h0.reshape({Bn, F}) : torch::zeros({Bn, F}, a.options());
  return LinearScanFn::apply(flat(a), flat(b), start, chunk_size).view(a.sizes());
}

RecurrentResult selective_scan_chunk(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                     const torch::Tensor& B, const torch::Tensor& C,
                                     const torch::Tensor& initial_state, int64_t chunk_size) {
  check_selective_scan_inputs("selective_scan_chunk", x, dt, A, B, C, initial_state);
  check_chunking("selective_scan_chunk", x.size(1), chunk_size);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  const int64_t T = x.size(1);
  auto dtf = dt.to(ct);
  auto a = (dtf.unsqueeze(-1) * A.to(ct)).exp();                              // e^{Δ_t A} [B, T, D, N]
  auto b = (dtf * x.to(ct)).unsqueeze(-1) * B.to(ct).unsqueeze(2);            // Δ_t x_t B_t [B, T, D, N]
  auto h = linear_scan_chunked(a, b, initial_state.defined() ? initial_state.to(ct) : torch::Tensor(), chunk_size);
  auto o = torch::matmul(h, C.to(ct).unsqueeze(-1)).squeeze(-1);             // y_t = h_t C_t [B, T, D]
  return {o.to(x.scalar_type()), h.select(1, T - 1)};
}

}  // namespace mnemo
