// Mamba-2's SSD through the gated-linear-attention family's fused chunk kernel (runtime/gla/chunk_kernel.cuh) with
// its per-head scalar gate: the SSD recurrence Hs_t = e^{a_t} Hs_{t-1} + (dt_t x_t)ᵀ B_t, y_t = Hs_t C_tᵀ is simple
// GLA with q = C, k = B, v = dt·x, g = a = A·dt, scale 1 and the state transposed (S = Hsᵀ, [B, H, N, P]). B and C
// are broadcast from their groups to the heads; autograd carries the kernel's dq, dk, dv, dg back to C, B, x, dt
// and A.
#include "runtime/gla/gla.h"
#include "runtime/kernels/precision.h"
#include "runtime/mamba2/mamba2.h"

namespace mnemo {

RecurrentResult mamba2_ssd_chunk_fused(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                       const torch::Tensor& B, const torch::Tensor& C,
                                       const torch::Tensor& initial_state, int64_t chunk_size,
                                       const torch::Tensor& cu_seqlens) {
  const char* op = "mamba2_ssd_chunk_fused";
  const int64_t states = cu_seqlens.defined() ? cu_seqlens.numel() - 1 : x.size(0);
  const int64_t G = check_grouped_ssd_inputs(op, x, dt, A, B, C, initial_state, states).G;
  const int64_t H = x.size(2);
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  // Group g's B and C serve heads g·(H/G) .. (g+1)·(H/G) - 1.
  auto to_heads = [&](const torch::Tensor& t) {
    return G == H ? t.to(ct) : t.to(ct).repeat_interleave(H / G, 2);
  };
  const auto dtf = dt.to(ct);
  const auto v = x.to(ct) * dtf.unsqueeze(-1);       // [B, T, H, P]
  const auto g = A.to(ct).view({1, 1, H}) * dtf;      // [B, T, H], <= 0
  const auto s0 = initial_state.defined() ? initial_state.to(ct).transpose(-1, -2).contiguous() : torch::Tensor();
  RecurrentResult r = gla_chunk_fused(to_heads(C).contiguous(), to_heads(B).contiguous(), v.contiguous(),
                                      g.contiguous(), GlaGate::kScalar, 1.0, s0, chunk_size, cu_seqlens);
  return {r.o, r.final_state.transpose(-1, -2)};
}

bool mamba2_fused_kernel_available(const torch::Tensor& like) { return gla_fused_kernel_available(like); }

}  // namespace mnemo
