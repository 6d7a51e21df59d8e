// Token-by-token selective scan (docs/models.md#mamba).
#include "runtime/mamba/selective_scan.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_selective_scan_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                                 const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                                 const torch::Tensor& s0) {
  check_shape(op, "x", x, {-1, -1, -1});
  const int64_t Bn = x.size(0), T = x.size(1), D = x.size(2);
  check_shape(op, "dt", dt, {Bn, T, D});
  check_shape(op, "A", A, {D, -1});
  const int64_t N = A.size(1);
  check_shape(op, "B", B, {Bn, T, N});
  check_shape(op, "C", C, {Bn, T, N});
  if (s0.defined()) check_shape(op, "initial_state", s0, {Bn, D, N});
}

RecurrentResult selective_scan_recurrent(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                         const torch::Tensor& B, const torch::Tensor& C,
                                         const torch::Tensor& initial_state) {
  check_selective_scan_inputs("selective_scan_recurrent", x, dt, A, B, C, initial_state);
  check_chunking("selective_scan_recurrent", x.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  const int64_t Bn = x.size(0), T = x.size(1), D = x.size(2), N = A.size(1);
  auto dtf = dt.to(ct), Af = A.to(ct), Bf = B.to(ct), Cf = C.to(ct);
  auto u = dtf * x.to(ct);  // Δ x [B, T, D]
  auto h = initial_state.defined() ? initial_state.to(ct) : torch::zeros({Bn, D, N}, u.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    auto decay = (dtf.select(1, t).unsqueeze(-1) * Af).exp();                      // e^{Δ_t A} [B, D, N]
    h = decay * h + u.select(1, t).unsqueeze(-1) * Bf.select(1, t).unsqueeze(1);  // + Δ_t x_t B_t
    outs.push_back(torch::matmul(h, Cf.select(1, t).unsqueeze(-1)).squeeze(-1));  // y_t = h_t C_t [B, D]
  }
  return {torch::stack(outs, 1).to(x.scalar_type()), h};
}

}  // namespace mnemo
