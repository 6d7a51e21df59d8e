// Fused CPU kernels for the layers every block runs: RMSNorm, the SwiGLU gate, RoPE and causal
// softmax attention, each one autograd Function with a hand-written forward and backward, where eager LibTorch
// makes one memory pass per op (5–10 per layer). They compute the same functions as the eager formulas in
// runtime/layers.cpp and runtime/attention (kept as the references, tests/test_fused_ops.cpp compares them).
//
// Used only where fused_cpu_eligible() holds: CPU tensors of one dtype, fp32 or fp64, CPU autocast off. Everything
// else (CUDA, bf16, autocast) takes the eager path unchanged. MNEMO_FUSED_CPU=0 in the environment (or
// set_fused_cpu_enabled(false)) turns them off, which is how before/after is measured on one binary.
// Gradients are first-order kernels; a backward under create_graph recomputes the eager reference and
// differentiates it, so higher-order gradients stay right.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <initializer_list>
#include <vector>

namespace mnemo {

// On unless MNEMO_FUSED_CPU=0 (read once) or switched off here.
bool fused_cpu_enabled();
void set_fused_cpu_enabled(bool on);

// Scoped switch (tests, benchmarks): restores the previous setting.
class FusedCpuScope {
 public:
  explicit FusedCpuScope(bool on) : previous_(fused_cpu_enabled()) { set_fused_cpu_enabled(on); }
  ~FusedCpuScope() { set_fused_cpu_enabled(previous_); }

 private:
  bool previous_;
};

// Enabled, every defined tensor on the CPU with the same dtype, fp32 or fp64, and CPU autocast off.
bool fused_cpu_eligible(at::ArrayRef<torch::Tensor> tensors);

// RMSNorm over the last dim: y = x · r · w, r = (mean(x²) + eps)^-½. weight: [D] of x's dtype.
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// SwiGLU gate on the output of the concatenated gate|up projection: gu = [g, u] over the last dim (2I);
// h = silu(g) ⊙ u = g σ(g) u, shape [..., I].
torch::Tensor fused_swiglu_gate(const torch::Tensor& gu);

// Rotate-half RoPE of x [B, H, T, D] (D even) with per-position tables cos, sin: [T, D] whose two halves are
// equal (the layout apply_rope caches): y_i = x_i c_i − x_{i+D/2} s_i, y_{i+D/2} = x_{i+D/2} c_i + x_i s_i.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Softmax attention with the visibility of blocked_attention (key j visible to query i iff
// k_offset + j <= q_offset + i and, with window W > 0, k_offset + j > q_offset + i − W): q [B, H, Tq, D],
// k, v [B, H, Tk, D], output [B, H, Tq, D] (a view of [B, Tq, H, D] memory). Only the visible blocks of QKᵀ are
// computed. False from fused_attention_supported when a query sees no key (the eager path's NaN rows).
// keys_per_step r > 1 (window 0 only): the keys come r per position, interleaved (Titans/ATLAS MAC: the memory
// read-out and the token of one position), and key j is visible to query i iff k_offset + j < r (q_offset + i + 1)
// (r = 1: the causal rule above); a negative k_offset puts -k_offset always-visible keys first.
// bias_q [B, H, Tq] and bias_k [B, H, Tk] (both or neither) add bias_q_i − bias_k_j to the scaled logits before the
// softmax: forgetting attention's forget-gate term c_i − c_j (runtime/forgetting_attn); their gradients are the row
// sums of the logits' gradient and minus its column sums.
bool fused_attention_supported(int64_t Tq, int64_t Tk, int64_t q_offset, int64_t k_offset, int64_t window,
                               int64_t keys_per_step = 1);
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t q_offset, int64_t k_offset, int64_t window, int64_t keys_per_step = 1,
                              const torch::Tensor& bias_q = {}, const torch::Tensor& bias_k = {});

namespace fused_cpu {

// Row-major C[M×N] = alpha · op(A)[M×K] · op(B)[K×N] + beta · C on one thread, op = transpose when trans_*.
// lda/ldb/ldc are row strides. The BLAS LibTorch itself calls (sgemm_/dgemm_ found in the process), else at::addmm_.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);
// The same through at::addmm_ (gemm's fallback where the process has no Fortran BLAS symbol, e.g. a static MKL).
template <typename T>
void gemm_aten(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc);
bool blas_found();  // whether gemm calls the BLAS directly

// t itself when its last dim has stride 1 (the kernels walk rows), else a contiguous copy.
torch::Tensor unit_last_stride(const torch::Tensor& t);

// An uninitialised dense tensor of t's sizes whose dims are laid out in the order of t's strides (empty_like
// keeps a layout only for a dense t): a strided view of [B, T, H, D] memory seen as [B, H, T, D] gives [B, T, H, D]
// memory again, so that the transposes and views after it stay free. Contiguous instead where that layout would
// not have a unit last stride (the kernels write rows).
torch::Tensor empty_like_layout(const torch::Tensor& t);

// Gradients of reference(inputs) with respect to the inputs that require grad, with a graph (create_graph):
// the backward of a fused op when autograd records it (a higher-order gradient).
torch::autograd::variable_list reference_backward(
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& reference,
    const std::vector<torch::Tensor>& inputs, const torch::Tensor& grad_output);

}  // namespace fused_cpu
}  // namespace mnemo
