// Lattice — orthogonal slot memory, DEC and DOT variants (docs/models.md#lattice).
// Per head: state S [B, H, m, d] (rows = slots s_i), k, q [B, T, H, m], v [B, T, H, d],
// gates γ, μ [B, T, H] in (0, 1). Read after write: y_t = S_t^T q_t (docs/models.md#conventions).
//   exact (docs/models.md#lattice, C = 1):  h = Σ_i k_i φ_i - v (DEC) | -v (DOT), κ_i = k_i/n_i, Δ_i = κ_i P(s_i) h,
//                         s_i ← β_i (μ s_i - γ Δ_i), β_i = n_i / sqrt(μ² n_i² + γ² ||Δ_i||² + 1e-12)
//   chunked (docs/models.md#lattice, approximation (17)) with chunk-start anchor S^0 (norms n_i = ||s_i^0||):
//     S_τ = diag(g_τ) S_{τ-1} + w_τ h_τ^T, g = β(μ + γ ĥ κ), w = -β γ κ, ĥ_i = s_i^0·h / n_i²,
//     ||Δ_i||² = κ_i² (||h||² - n_i² ĥ_i²)⁺, and at every chunk end each slot is rescaled to n_i.
// All math runs in fp32 (fp64 when an input is fp64); y is returned in v's dtype.
#pragma once
#include <torch/torch.h>

namespace mnemo {

struct LatticeState {
  torch::Tensor S;   // running state [B, H, m, d]
  torch::Tensor S0;  // chunk-start anchor [B, H, m, d]
  int64_t pos = 0;   // tokens consumed inside the current chunk (0 <= pos < C)
};

struct LatticeResult {
  torch::Tensor y;  // [B, T, H, d]
  LatticeState state;
};

// docs/models.md#lattice exact recurrence (token loop; no chunk anchor, no renormalisation).
LatticeResult lattice_exact(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const torch::Tensor& S,
                            bool dec);

// Approximation (17), token by token with the chunk-start anchor (the reference and the decode step).
LatticeResult lattice_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st,
                                int64_t chunk, bool dec);

// Approximation (17), parallel inside each chunk (explicit gate products, no log space: docs/models.md#lattice, docs/models.md#numerical-stability).
// Where the scan kernel takes the inputs (below) it runs the whole sequence instead.
LatticeResult lattice_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st,
                            int64_t chunk, bool dec);

// The same recurrence as one CUDA kernel a pass over the whole sequence (scan_kernel.cuh, fused_scan.cpp), with a
// hand-written backward that recomputes the states from checkpoints: lattice_chunk takes it on CUDA tensors in builds
// that link the kernels (unless MNEMO_FUSED_CUDA=0), and on CPU tensors over a sequential host grid inside a
// LatticeKernelHostScope(true) (the CPU tests prove the kernel's decomposition that way).
LatticeResult lattice_scan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& gamma, const torch::Tensor& mu, const LatticeState& st, int64_t chunk,
                           bool dec);
bool lattice_scan_eligible(const torch::Tensor& q);
bool lattice_kernel_on_host();
void set_lattice_kernel_on_host(bool on);
// Passes (forward or backward) the scan kernel has run in this process, on the host grid or the device.
int64_t lattice_kernel_passes();
class LatticeKernelHostScope {
 public:
  explicit LatticeKernelHostScope(bool on) : previous_(lattice_kernel_on_host()) { set_lattice_kernel_on_host(on); }
  ~LatticeKernelHostScope() { set_lattice_kernel_on_host(previous_); }
  LatticeKernelHostScope(const LatticeKernelHostScope&) = delete;
  LatticeKernelHostScope& operator=(const LatticeKernelHostScope&) = delete;

 private:
  bool previous_;
};

}  // namespace mnemo
