// Helpers shared by the linear-recurrent kernels (linear_attn, retnet/simple_gla, gla, mamba2):
// result type, compute precision (precision.h), shape checks that end in mnemo::Error,
// and the [B, T, H, D] <-> [B, H, N, C, D] chunk reshapes (right zero-padding to a multiple of C).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

// Output of a linear-recurrent kernel: o [B, T, H, V] in the input dtype, final state in the
// compute dtype (layout per kernel, e.g. [B, H, K, V]).
struct RecurrentResult {
  torch::Tensor o;
  torch::Tensor final_state;
};

// Throws mnemo::Error "<op>: <name> must have shape [..] but has [..]" unless t is defined and
// has exactly `shape` (entries < 0 match any size).
void check_shape(const std::string& op, const std::string& name, const torch::Tensor& t,
                 const std::vector<int64_t>& shape);
// Throws mnemo::Error unless chunk_size >= 1 and T >= 1.
void check_chunking(const std::string& op, int64_t T, int64_t chunk_size);

// Right zero-pads dim 1 (time) of x [B, T, ...] to a multiple of `chunk`. Zero keys/values add
// nothing to a state and zero log-decays keep it, so padding never changes the final state.
torch::Tensor pad_time(const torch::Tensor& x, int64_t chunk);
// x [B, T, H, ...] -> [B, H, N, C, ...] with N = ceil(T / C) (zero-padded), contiguous: the
// chunks feed several batched matmuls, which would otherwise each copy a permuted view.
torch::Tensor to_chunks(const torch::Tensor& x, int64_t chunk);
// y [B, H, N, C, ...] -> [B, T, H, ...] (padding dropped).
torch::Tensor from_chunks(const torch::Tensor& y, int64_t T);

// True while autograd records a graph: kernels then avoid in-place updates of intermediates (one
// saved for backward must not change); without it (inference, benchmarks) they update in place,
// which saves allocations and passes over memory. Both paths compute the same values.
inline bool recording_grad() { return torch::GradMode::is_enabled(); }

// tril(t, diagonal) of a freshly computed tensor, in place when no graph is recorded. Cheaper than
// masked_fill with a broadcast boolean mask on CPU; note tril zeroes NaN above the diagonal too.
inline torch::Tensor tril_fresh(torch::Tensor t, int64_t diagonal = 0) {
  return recording_grad() ? t.tril(diagonal) : t.tril_(diagonal);
}

// Inclusive cumulative sum over dim −2 (the rows of each chunk). Without autograd on CPU, as in-place
// row adds (sequential, like at::cumsum), 1.6× faster than at::cumsum on a middle dimension there.
torch::Tensor cumsum_rows(const torch::Tensor& x);

// Reference-row factorisation of in-chunk decays (docs/models.md#numerical-stability rules 3–4). With b the in-chunk inclusive
// cumulative log decay (b <= 0), e^{b_i − b_j} = e^{b_i} · e^{−b_j}, so a decayed score matrix is one
// matmul (Q ⊙ e^{b}) (K ⊙ e^{−b})ᵀ masked after the product, with no [C, C] exponent. Every factor lies
// in [e^{−span}, e^{span}], span = max |b|; true when the span is at most 40 (fp32/lower) or 300 (fp64),
// far from overflow and underflow. Kernels use the masked-difference form otherwise.
bool decay_factorisable(const torch::Tensor& b_cum);

// a @ b for a [..., M, K], b [..., K, N] with the same batch dims. Without autograd, on CPU fp32/fp64,
// one BLAS gemm per matrix through the Fortran interface of the BLAS LibTorch loaded (sgemm_/dgemm_,
// found at run time), which skips bmm's per-matrix dispatch (about 1 µs each: 128 chunk-matrices of
// 64 × 32 spend a quarter of their time there). Same BLAS, same values; everything else (autograd,
// CUDA, other dtypes, broadcasting, no such symbol) goes through torch::matmul.
torch::Tensor chunk_matmul(const torch::Tensor& a, const torch::Tensor& b);

// The inter-chunk scan of a diagonal-decay chunked recurrence: S_{n+1} = decay_n ⊙ S_n + increment_n from
// S_0 = initial, with decay [B, H, N, ...] (each chunk's total decay, broadcast against the state) and increments
// [B, H, N, ...]. Returns the state at each chunk's start, stacked [B, H, N, ...], and the final state S_N.
struct ChunkStateScan {
  torch::Tensor starts, final_state;
};
ChunkStateScan chunk_state_scan(const torch::Tensor& decay, const torch::Tensor& increments, torch::Tensor initial);

// The inter-chunk pass of a WY-form chunked recurrence whose state decays per row (Kimi Delta Attention, RWKV-7):
//   X_n = U_n − W_n S_n,   S_{n+1} = Diag(d_n) S_n + B_nᵀ X_n (+ E_n)
// with W, B [B, H, N, C, R], U [B, H, N, C, V], row_decay [B, H, N, R, 1] (d_n), increments [B, H, N, R, V] (E_n,
// undefined: none) and initial [B, H, R, V]. Returns the state at each chunk's start [B, H, N, R, V], every X_n
// [B, H, N, C, V] and S_N.
struct ChunkDeltaStateScan {
  torch::Tensor starts, corrected, final_state;
};
ChunkDeltaStateScan chunk_delta_state_scan(const torch::Tensor& W, const torch::Tensor& U, const torch::Tensor& B,
                                           const torch::Tensor& row_decay, const torch::Tensor& increments,
                                           torch::Tensor initial);

// Both passes as one CUDA kernel a pass (runtime/kernels/state_pass_kernel.cuh, chunk_state_pass.cpp) instead of the
// eager chunk loop, whose N steps of a few small ops each leave a GPU waiting on launches: taken on CUDA tensors in
// builds that link the kernels (unless MNEMO_FUSED_CUDA=0), for fp32/fp64 states whose decay is one per state row
// (or one per chunk); on CPU tensors only inside a StatePassKernelHostScope(true), where its block code runs over the
// host grid (how the CPU tests prove it). Both routes give the same values and gradients.
bool state_pass_kernel_route(const torch::Tensor& like);
bool state_pass_kernel_on_host();
void set_state_pass_kernel_on_host(bool on);
// Passes (forward or backward) the state-pass kernel has run in this process, on the host grid or the device.
int64_t state_pass_kernel_passes();
class StatePassKernelHostScope {
 public:
  explicit StatePassKernelHostScope(bool on) : previous_(state_pass_kernel_on_host()) {
    set_state_pass_kernel_on_host(on);
  }
  ~StatePassKernelHostScope() { set_state_pass_kernel_on_host(previous_); }
  StatePassKernelHostScope(const StatePassKernelHostScope&) = delete;
  StatePassKernelHostScope& operator=(const StatePassKernelHostScope&) = delete;

 private:
  bool previous_;
};

// Sizes of the pieces a chunk loop over T tokens visits when `offset` tokens of the current chunk (size `chunk`) are
// already absorbed: chunk - offset (when offset > 0), then chunk, chunk, ..., then the rest. Empty when T = 0.
std::vector<int64_t> chunk_piece_sizes(int64_t T, int64_t chunk, int64_t offset);
// The pieces of x along `dim` (sizes summing to x.size(dim)) as views; undefined x gives undefined pieces. Under
// autograd this is one split node whose backward concatenates the pieces' gradients once. A narrow() per piece
// instead gives every piece a backward that writes into a zero tensor of x's full size, which the engine then adds
// up: O(T²/b) memory traffic (at T = 2048 it was a quarter of ttt_mlp's training step).
std::vector<torch::Tensor> split_pieces(const torch::Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// split_pieces of x [B, T, H, ..] along time, each piece as [B, H, n, ..] (a transposed view).
std::vector<torch::Tensor> time_pieces(const torch::Tensor& x, const std::vector<int64_t>& sizes);

// Per-channel decayed scores A_ij = Σ_c Q_ic K_jc e^{B_ic − B_jc} for j <= i (zero above the diagonal), with B the
// in-chunk inclusive cumulative log decay [.., C, K] (B <= 0, non-increasing along rows): GLA's intra-chunk matrix,
// KDA's K Kᵀ and Q Kᵀ. Built from sub-chunks of c rows (c = the largest divisor of C not above `sub_chunk`):
// diagonal blocks from clamped exact differences, earlier blocks against the first row r of each block row,
// (Q ⊙ e^{B − B_r})(K ⊙ e^{B_r − B})ᵀ, every factor <= 1 (docs/models.md#numerical-stability). Differentiable.
torch::Tensor per_channel_decayed_scores(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& B,
                                         int64_t sub_chunk);

// Lower-triangular (incl. diagonal) boolean mask [n, n]; `strict` excludes the diagonal.
torch::Tensor causal_mask(int64_t n, const torch::Device& device, bool strict = false);

}  // namespace mnemo
