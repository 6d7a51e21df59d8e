// The two forms of the fused deep-memory chunk node (fused_chunk.h), which share its saved tensors:
//   the tensor form (fused_chunk.cpp): LibTorch ops, every device and dtype — and the reference the CPU form is
//     tested against (tests/test_fused_chunk.cpp runs both, FusedCpuScope on and off);
//   the kernel form (fused_chunk_kernel.cpp): the CUDA kernel of chunk_kernel.cuh on CUDA tensors, and its block
//     code over a host grid on CPU tensors inside a DeepMemoryKernelHostScope (fused_chunk.h);
//   the CPU form (fused_chunk_cpu.cpp): fp32/fp64 on the CPU, each (batch, head) as row loops and direct GEMMs. At
//     the benchmark shapes the tensor form dispatched ~150 small ops per chunk, about a quarter of a Titans layer.
#pragma once
#include <torch/torch.h>

namespace mnemo::fused_chunk_forms {

using torch::Tensor;
using torch::autograd::variable_list;

// Inputs, in apply() order (undefined ones are absent: qf = q, kf = k, no momentum).
enum In { Q, QF, K, KF, V, W0, W1, S0, S1, A0, A1, CA, CD, CC, AE, DE, CE, PE, EE, kInputs };

// The inner-gradient clip's per-row quantities (memory.h clip_grad_terms), [B, H, N] each:
//   kk = |φk|², dd = |Δ|², ee = |g_y|², gg = |G0|², s = dd kk + ee gg, f = τ / sqrt(max(τ², s)).
struct ClipSaved {
  Tensor f, s, kk, dd, ee, gg;
};

// The forward's outputs and what the backward keeps.
struct Forward {
  Tensor y, w0, w1, s0, s1;    // outputs
  Tensor P0, G0, E, RP0d, Dl;  // anchor pass (P0 = GELU'(H0), RP0d = R ⊙ GELU''(H0), Δ = R ⊙ P0)
  ClipSaved clip;              // τ > 0 only
  Tensor c0, c1;               // cols after the clip (Δ, g_y without it)
  Tensor QK, X1, M1, GG, Ga, Pa;  // read-out
};

// The node's sizes read off its inputs: B, H, n read rows, N ≥ n term rows, widths d (q, k, v), f (φq, φk), hid.
struct Sizes {
  int64_t B, H, n, N, d, f, hid;
};
Sizes sizes_of(const variable_list& in);
// Uninitialised tensors for what a pass writes, as the CPU and kernel forms fill them: the forward's outputs and
// saved tensors (c0, c1 are Δ, g_y themselves without the clip), and the gradients of the inputs (undefined where
// an input has none: q's is the output gradient itself, set by the caller).
Forward empty_forward(const Sizes& z, const torch::TensorOptions& opt, bool mom, double tau);
variable_list empty_input_grads(const Sizes& z, const torch::TensorOptions& opt, bool mom, bool l2);

// Whether the CPU form takes these inputs (fp32/fp64 CPU tensors of one dtype, fused CPU kernels on).
bool cpu_form_eligible(const variable_list& in, bool mom);
Forward cpu_forward(const variable_list& in, bool mom, bool l2, double tau);
// Gradients of every input (kInputs entries, undefined where none) given the output gradients go (y, w0, w1[, s0,
// s1]; undefined ones count as zero).
variable_list cpu_backward(const variable_list& in, const Forward& f, const variable_list& go, bool mom, bool l2,
                           double tau);

// The kernel form (fused_chunk_kernel.cpp): whether it takes these inputs (fp32/fp64 of one dtype on one device:
// CUDA in builds that link the kernels, the CPU inside a DeepMemoryKernelHostScope), and its two passes, which keep
// and read the same saved tensors as the other forms. bf16_products (fp32 inputs): the kernel's matrix products take
// bf16 operands with fp32 sums (chunk_kernel.cuh Dims::bf16_products); both passes of a call take the same.
bool kernel_form_eligible(const variable_list& in, bool mom);
Forward kernel_forward(const variable_list& in, bool mom, bool l2, double tau, bool bf16_products);
variable_list kernel_backward(const variable_list& in, const Forward& f, const variable_list& go, bool mom, bool l2,
                              double tau, bool bf16_products);

}  // namespace mnemo::fused_chunk_forms
