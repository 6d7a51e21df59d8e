// Token-by-token Mamba-2 SSD recurrence (docs/models.md#mamba2).
#include "runtime/mamba2/mamba2.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

void check_mamba2_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                         const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                         const torch::Tensor& s0) {
  check_shape(op, "x", x, {-1, -1, -1, -1});
  const int64_t Bn = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3);
  check_shape(op, "dt", dt, {Bn, T, H});
  check_shape(op, "A", A, {H});
  check_shape(op, "B", B, {Bn, T, H, -1});
  check_shape(op, "C", C, {Bn, T, H, B.size(3)});
  if (s0.defined()) check_shape(op, "initial_state", s0, {Bn, H, P, B.size(3)});
}

RecurrentResult mamba2_ssd_recurrent(const torch::Tensor& x, const torch::Tensor& dt,
                                     const torch::Tensor& A, const torch::Tensor& B,
                                     const torch::Tensor& C, const torch::Tensor& initial_state) {
  check_mamba2_inputs("mamba2_ssd_recurrent", x, dt, A, B, C, initial_state);
  check_chunking("mamba2_ssd_recurrent", x.size(1), 1);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  const int64_t Bn = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = B.size(3);
  auto dtf = dt.to(ct);
  auto X = x.to(ct) * dtf.unsqueeze(-1);                 // dt · x
  auto decay = (A.to(ct).view({1, 1, H}) * dtf).exp();  // exp(A dt) [B, T, H]
  auto Bf = B.to(ct), Cf = C.to(ct);
  auto Hs = initial_state.defined() ? initial_state.to(ct) : torch::zeros({Bn, H, P, N}, X.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(T);
  for (int64_t t = 0; t < T; ++t) {
    Hs = decay.select(1, t).unsqueeze(-1).unsqueeze(-1) * Hs +
         X.select(1, t).unsqueeze(-1) * Bf.select(1, t).unsqueeze(-2);
    outs.push_back(torch::matmul(Hs, Cf.select(1, t).unsqueeze(-1)).squeeze(-1));  // [B, H, P]
  }
  return {torch::stack(outs, 1).to(x.scalar_type()), Hs};
}

}  // namespace mnemo
