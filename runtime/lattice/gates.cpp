// Lattice kernel internals (docs/models.md#lattice, see gates.h): input checks and preparation, the anchor gates of
// approximation (17) and the chunk-end renormalisation shared by naive.cpp and chunk.cpp.
#include "runtime/lattice/gates.h"

#include "core/common.h"
#include "runtime/kernels/precision.h"

namespace mnemo {
namespace lattice_detail {

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                  const torch::Tensor& mu, const torch::Tensor& S) {
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.dim() != 4 || v.size(1) != q.size(1) || gamma.dim() != 3 ||
      mu.sizes() != gamma.sizes() || S.dim() != 4 || S.size(2) != q.size(3) || S.size(3) != v.size(3))
    throw Error("lattice: expected q, k [B,T,H,m], v [B,T,H,d], gamma, mu [B,T,H], S [B,H,m,d]; got q " +
                c10::str(q.sizes()) + ", v " + c10::str(v.sizes()) + ", gamma " + c10::str(gamma.sizes()) +
                ", S " + c10::str(S.sizes()));
}

torch::Tensor slot_norm(const torch::Tensor& S) { return (S * S).sum(-1).sqrt(); }  // [B, H, m]

Gates anchor_gates(const torch::Tensor& S0, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& ga,
                   const torch::Tensor& mu, bool dec) {
  auto n = slot_norm(S0).unsqueeze(2);                           // [B, H, 1, m]
  auto h = dec ? torch::matmul(k / n, S0) - v : -v;              // h = φ(S0)^T k - v  |  -v
  auto hh = torch::matmul(h, S0.transpose(-1, -2)) / (n * n);    // ĥ_i = s_i·h / n_i²
  auto kap = k / n;                                              // κ_i = k_i / n_i
  auto hsq = (h * h).sum(-1, true);                              // ||h||²
  auto dsq = (kap * kap * (hsq - n * n * hh * hh)).clamp_min(0);  // ||Δ_i||² (docs/models.md#lattice.2)
  auto ga_ = ga.unsqueeze(-1), mu_ = mu.unsqueeze(-1);
  auto beta = n * torch::rsqrt(mu_ * mu_ * n * n + ga_ * ga_ * dsq + 1e-12);  // docs/models.md#lattice.1: μ² n²
  return {h, beta * (mu_ + ga_ * hh * kap), -beta * ga_ * kap};
}

// Rescale every slot of S to the norm of the matching slot of S0 (chunk-end decision, docs/models.md#lattice).
torch::Tensor renormalise(const torch::Tensor& S, const torch::Tensor& S0) {
  return S * (slot_norm(S0) / slot_norm(S)).unsqueeze(-1);
}

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& gamma,
                 const torch::Tensor& mu) {
  const auto dt = recurrence_dtype(v);
  return {q.to(dt).transpose(1, 2), k.to(dt).transpose(1, 2), v.to(dt).transpose(1, 2),
          gamma.to(dt).transpose(1, 2), mu.to(dt).transpose(1, 2), dt};
}

}  // namespace lattice_detail
}  // namespace mnemo
