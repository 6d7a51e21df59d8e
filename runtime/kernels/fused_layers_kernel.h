// The row kernels of the layers every block runs — RMSNorm, the SwiGLU gate and rotate-half RoPE, forward and
// backward — as a torch-free interface (raw pointers, sizes, a stream) shared by the CUDA launchers
// (fused_layers.cu) and the host runs (fused_layers_node.cpp). Block code and equations: fused_layers.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnemo::layers_kernel {

enum class Element : int { kFloat32 = 0, kFloat64 = 1, kBFloat16 = 2 };
// Arithmetic in fp32 for fp32/bf16 elements, fp64 for fp64; per-row statistics and RoPE tables in that type too.

// Rows of a row-major [rows, dim] array; each block takes rows_per_block consecutive rows.
struct RowProblem {
  int64_t rows = 0, dim = 0;
  int64_t rows_per_block = 1;
  double eps = 1e-6;  // RMSNorm's ε
};
constexpr int64_t row_blocks(const RowProblem& p) { return (p.rows + p.rows_per_block - 1) / p.rows_per_block; }

struct RmsNormForward {
  const void* x = nullptr;  // [rows, dim] element
  const void* w = nullptr;  // [dim] element
  void* y = nullptr;        // [rows, dim] element
  void* rstd = nullptr;     // [rows] accumulation type: (mean x² + ε)^-½, kept for the backward (or null)
};

struct RmsNormBackward {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* rstd = nullptr;  // the forward's
  const void* dy = nullptr;    // [rows, dim] element
  void* dx = nullptr;          // [rows, dim] element, or null (not needed)
  void* dw_partial = nullptr;  // [row_blocks, dim] accumulation type: each block's Σ dy ⊙ x · r; or null
};

// The SwiGLU gate on the two projections g = x W_gate, u = x W_up (each [rows, inner], row-major):
// h = silu(g) ⊙ u. Each block takes items_per_block consecutive elements.
struct GateProblem {
  int64_t rows = 0, inner = 0;
  int64_t items_per_block = 2048;
};
constexpr int64_t gate_blocks(const GateProblem& p) {
  return (p.rows * p.inner + p.items_per_block - 1) / p.items_per_block;
}

struct GatePointers {
  const void* g = nullptr;   // [rows, inner] element
  const void* u = nullptr;   // [rows, inner] element
  const void* dh = nullptr;  // backward: [rows, inner] element
  void* h = nullptr;         // forward: [rows, inner] element
  void* dg = nullptr;        // backward: [rows, inner] element
  void* du = nullptr;        // backward: [rows, inner] element
};

// Rotate-half RoPE of x [B, H, T, D] (D even; any strides with a unit last one) into y (its own strides):
// y_i = x_i c − x_{i+D/2} s, y_{i+D/2} = x_{i+D/2} c + x_i s with c, s the tables' [t, i] entries. The backward is
// the same map with −s (the rotation's transpose): `inverse`. Each block takes rows_per_block (b, h, t) rows.
struct RopeProblem {
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  int64_t x_stride[3] = {0, 0, 0};  // strides of x's B, H, T dims, in elements
  int64_t y_stride[3] = {0, 0, 0};
  int64_t rows_per_block = 1;
  bool inverse = false;
};
constexpr int64_t rope_rows(const RopeProblem& p) { return p.batch * p.heads * p.seq; }
constexpr int64_t rope_blocks(const RopeProblem& p) { return (rope_rows(p) + p.rows_per_block - 1) / p.rows_per_block; }

struct RopePointers {
  const void* x = nullptr;    // element
  const void* cos = nullptr;  // [T, D] accumulation type (each half the same)
  const void* sin = nullptr;
  void* y = nullptr;          // element
};

// CUDA launchers (fused_layers.cu; only in builds with the CUDA kernels). `stream` is a cudaStream_t. They throw
// std::runtime_error naming the CUDA error when a launch fails.
void launch_rms_norm_forward(const RowProblem& p, const RmsNormForward& ptr, Element element, void* stream);
void launch_rms_norm_backward(const RowProblem& p, const RmsNormBackward& ptr, Element element, void* stream);
void launch_swiglu_gate_forward(const GateProblem& p, const GatePointers& ptr, Element element, void* stream);
void launch_swiglu_gate_backward(const GateProblem& p, const GatePointers& ptr, Element element, void* stream);
void launch_rope(const RopeProblem& p, const RopePointers& ptr, Element element, void* stream);

}  // namespace mnemo::layers_kernel
