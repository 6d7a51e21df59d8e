// One linear segment of the Miras channel-wise dual form (chunk.cpp dual_segment, factorised decays) as a single
// autograd node with a hand-written backward. The op-by-op form records ~70 small ops per segment and about twice as
// many backward nodes; at the benchmark shapes their dispatch, not the arithmetic, dominated Moneta / Yaad / Memora
// training, as it did for Titans (runtime/deep_memory/fused_chunk.h).
//
// Per head, tokens as rows (n tokens, d = d_h, hid = 4 d), anchor Â0 [hid, d], Â1 [d, hid], start weights W0, W1:
//   anchor pass  H0 = K Â0ᵀ, G0 = GELU(H0), U0 = G0 Â1ᵀ, N0 = LN(U0), E = K + N0 ⊙ γ + β - V, g_y = φ(E),
//                Gu = (γ g_y - mean(γ g_y) - N0 mean(γ g_y N0)) / s0,  Dl = (Gu Â1) ⊙ GELU'(H0)
//   decays       b = cumsum(log α), e^{±b};  K_η = K ⊙ η,  Gu_η = Gu ⊙ η
//   read-out     h = σ0 [(Q e^b) W0ᵀ - ((Q e^b)(K_η e^{-b})ᵀ ⊙ M) Dl],  a = GELU(h),
//                u = σ1 e^b ⊙ [a W1ᵀ - ((a G0ᵀ) ⊙ M)(Gu_η e^{-b})],  out = Q + LN(u) ⊙ γ + β
//   segment end  W0' = W0 ⊙ e^{b_n} (input axis) - Dlᵀ (K_η ⊙ e^{b_n - b}),  W1' = e^{b_n} ⊙ W1 (output axis) -
//                (Gu_η ⊙ e^{b_n - b})ᵀ G0
// φ: ℓ2 (identity), ℓp (p E (E² + ε)^{(p-2)/2}) or Huber (per-token switch on RMS(E) ≤ δ); σ0, σ1: Moneta's frozen
// ℓq scales (absent otherwise). tests/test_miras.cpp checks the node against the composed form in fp64 (outputs,
// end state, every gradient) and, through miras_chunk, against the token-by-token reference.
#pragma once
#include <torch/torch.h>

#include "runtime/deep_memory/memory.h"
#include "runtime/miras/miras.h"

namespace mnemo {

struct MirasSegmentInputs {
  torch::Tensor q, k, v;        // [B, H, n, d]
  torch::Tensor log_alpha, eta; // [B, H, n, G], G = d or 1
  torch::Tensor delta;          // [B, H, n] (Huber only; else undefined)
  torch::Tensor gamma, beta;    // LN affine, broadcastable [1, H, 1, d]
  MemoryWeights anchor, cur;    // {W_2 [B, H, hid, d], W_1 [B, H, d, hid]}; anchor already scaled by σ (Moneta)
  torch::Tensor scale0, scale1; // σ0, σ1 [B, H, 1, 1] (Moneta) or undefined
};

struct MirasSegmentOutput {
  torch::Tensor out;  // [B, H, n, d]
  MemoryWeights end;  // weights after the segment's last token
};

// o: the bias ("l2" | "lp" | "huber") with its constants and the memory's ln_eps, as miras_chunk checked them.
MirasSegmentOutput miras_fused_segment(const MirasSegmentInputs& in, const MirasOptions& o);

// The node's forms: on CUDA tensors (fp32/fp64) its CUDA kernel (segment_kernel.cuh) in builds that link the kernels
// (unless MNEMO_FUSED_CUDA=0, runtime/kernels/fused_layers.h); elsewhere the tensor form above. Inside a
// MirasKernelHostScope(true), CPU tensors run the kernel's block code over a sequential host grid instead (the CPU
// tests prove the kernel's decomposition that way, tests/test_cuda_kernels_miras.cpp).
bool miras_kernel_on_host();
void set_miras_kernel_on_host(bool on);
// Passes (forward or backward) the kernel form has run in this process, on the host grid or the device.
int64_t miras_kernel_passes();
class MirasKernelHostScope {
 public:
  explicit MirasKernelHostScope(bool on) : previous_(miras_kernel_on_host()) { set_miras_kernel_on_host(on); }
  ~MirasKernelHostScope() { set_miras_kernel_on_host(previous_); }
  MirasKernelHostScope(const MirasKernelHostScope&) = delete;
  MirasKernelHostScope& operator=(const MirasKernelHostScope&) = delete;

 private:
  bool previous_;
};

namespace miras_segment_kernel {

// The kernel form (fused_segment_kernel.cpp). Whether it takes these inputs: fp32/fp64 of one dtype on one device
// (CUDA in builds that link the kernels, the CPU inside a MirasKernelHostScope), gates per channel or per head.
bool eligible(const MirasSegmentInputs& in, const MirasOptions& o);
struct Forward {
  MirasSegmentOutput out;
  std::vector<torch::Tensor> saved;  // the kernel's intermediates, read by backward()
};
// bf16_products (fp32 inputs): the kernel's matrix products take bf16 operands with fp32 sums (segment_kernel.cuh
// Dims::bf16_products, as under a bf16 run on CUDA); the backward of a call takes its forward's choice.
Forward forward(const MirasSegmentInputs& in, const MirasOptions& o, bool bf16_products);
// The gradient of each input in the same fields (delta: Huber only; scale0, scale1: when given), shaped as the
// inputs (gamma, beta, anchor and cur summed over what they broadcast).
MirasSegmentInputs backward(const MirasSegmentInputs& in, const std::vector<torch::Tensor>& saved,
                            const torch::Tensor& grad_out, const torch::Tensor& grad_w0, const torch::Tensor& grad_w1,
                            const MirasOptions& o, bool bf16_products);

}  // namespace miras_segment_kernel

}  // namespace mnemo
