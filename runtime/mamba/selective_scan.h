// Mamba's selective scan (Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", arXiv
// 2312.00752 §3.2, Algorithm 2; docs/models.md#mamba): a diagonal state per channel d of N entries,
//   h_t[d, n] = exp(Δ_t[d] A[d, n]) h_{t-1}[d, n] + Δ_t[d] B_t[n] x_t[d],      y_t[d] = Σ_n C_t[n] h_t[d, n]
// (no D skip, no z gate: the mixer adds them). x, dt [B, T, D] (dt > 0, softplus applied), A [D, N] (< 0), B, C
// [B, T, N]; state h [B, D, N] (undefined = zeros). Output o [B, T, D] in x's dtype, final state in the compute dtype.
#pragma once
#include <torch/torch.h>

#include "runtime/kernels/chunking.h"

namespace mnemo {

// Token-by-token reference (mamba_ssm's selective_scan_ref).
RecurrentResult selective_scan_recurrent(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                         const torch::Tensor& B, const torch::Tensor& C,
                                         const torch::Tensor& initial_state = {});

// Chunked form: the elementwise linear recurrence h_t = a_t ⊙ h_{t-1} + b_t (a = e^{Δ A}, b = Δ x B) by
// linear_scan_chunked, then y = h C. One autograd node for the scan, whose backward is the same scan run backwards
// in time; it saves a and h, nothing per doubling step.
RecurrentResult selective_scan_chunk(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                     const torch::Tensor& B, const torch::Tensor& C,
                                     const torch::Tensor& initial_state = {}, int64_t chunk_size = 64);

// The same scan fused into one pass on CPU tensors (runtime/mamba/scan_fused.cpp), as mamba_ssm's kernel: sequential
// in time, channels in parallel, nothing of size [B, T, D, N] formed. Keeps the state at the start of every chunk of
// `chunk_size` steps; backward recomputes a chunk's states from there and runs the adjoint
//   G_t = ∂L/∂h_t = C_t ∂L/∂y_t + a_{t+1} G_{t+1},  ∂a_t = G_t h_{t−1},  ∂b_t = G_t
// backwards through it. Error on other devices.
RecurrentResult selective_scan_fused(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                     const torch::Tensor& B, const torch::Tensor& C,
                                     const torch::Tensor& initial_state = {}, int64_t chunk_size = 64);

// The same scan as one CUDA kernel a pass (runtime/mamba/scan_kernel.cuh; scan_kernel_node.cpp): per (channel, state
// entry) its own recurrence over a chunk, the read-out summed over the entries after it; states kept at chunk starts,
// the backward recomputing a chunk's states from there. Nothing of size [B, T, D, N] is formed (the workspace holds
// C + 1 rows of a tile's states and terms). Taken on CUDA tensors in builds that link the kernels (unless
// MNEMO_FUSED_CUDA=0); on CPU tensors its block code runs over a sequential host grid inside a
// MambaKernelHostScope(true) (how the CPU tests prove the kernel's decomposition).
RecurrentResult selective_scan_kernel(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                      const torch::Tensor& B, const torch::Tensor& C,
                                      const torch::Tensor& initial_state = {}, int64_t chunk_size = 64);
// Packed sequences (docs/models.md#packed-sequences): x [1, total, D] (dt, B, C alike) holds the sequences of
// cu_seqlens (int32 [S + 1], fla's convention) back to back, each from a zero state; a block runs one sequence. The
// outputs [1, total, D] equal selective_scan_kernel of each sequence on its own. CUDA tensors take the kernel, CPU
// tensors its block code over the host grid.
torch::Tensor selective_scan_kernel_packed(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                           const torch::Tensor& B, const torch::Tensor& C,
                                           const torch::Tensor& cu_seqlens, int64_t chunk_size = 64);
bool selective_scan_kernel_eligible(const torch::Tensor& x);
// Whether CUDA tensors like x take the kernel (a CUDA tensor, a build that links the kernels, MNEMO_FUSED_CUDA not 0).
bool selective_scan_kernel_on_device(const torch::Tensor& x);
bool mamba_kernel_on_host();
void set_mamba_kernel_on_host(bool on);
// Passes (forward or backward) the selective-scan kernel has run in this process, on the host grid or the device.
int64_t mamba_kernel_passes();
class MambaKernelHostScope {
 public:
  explicit MambaKernelHostScope(bool on) : previous_(mamba_kernel_on_host()) { set_mamba_kernel_on_host(on); }
  ~MambaKernelHostScope() { set_mamba_kernel_on_host(previous_); }
  MambaKernelHostScope(const MambaKernelHostScope&) = delete;
  MambaKernelHostScope& operator=(const MambaKernelHostScope&) = delete;

 private:
  bool previous_;
};

// h_t = a_t ⊙ h_{t-1} + b_t along dim 1 of a, b [B, T, ...] from h_{-1} = h0 [B, ...] (undefined = zeros); returns
// every h [B, T, ...]. Within each chunk of `chunk_size` steps all positions at once by recursive doubling
// (log2(chunk) rounds: b_t += a_t b_{t−k}, a_t *= a_{t−k}, for k = 1, 2, 4, ...), then the chunks in order, each
// from the last state of the one before. Only products of decays (<= 1 for a decay) are formed: nothing overflows.
// Backward: g_t = ∂L/∂h_t + a_{t+1} g_{t+1} (the same scan, reversed in time), ∂a_t = g_t h_{t−1}, ∂b_t = g_t,
// ∂h0 = a_0 g_0.
torch::Tensor linear_scan_chunked(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& h0,
                                  int64_t chunk_size);

// Shape checks shared by both forms (mnemo::Error naming the op and the input).
void check_selective_scan_inputs(const char* op, const torch::Tensor& x, const torch::Tensor& dt,
                                 const torch::Tensor& A, const torch::Tensor& B, const torch::Tensor& C,
                                 const torch::Tensor& s0);

}  // namespace mnemo
