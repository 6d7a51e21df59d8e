// Shared building blocks (docs/models.md#shared-building-blocks): RMSNorm, SwiGLU, short causal conv, gated output
// norm, RoPE, L2 normalisation, initialisation helpers.
#pragma once
#include <torch/torch.h>

#include <string>

#include "runtime/mixer.h"

namespace mnemo {

// nn::Linear without bias (unless asked) initialised normal(0, 0.02) (docs/models.md#conventions).
torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias = false);

// RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w over the last dim, computed in fp32 (docs/models.md#block-skeleton). On the CPU (fp32 or
// fp64, weight [D]) the fused kernel (runtime/kernels/fused_cpu.h), on CUDA (fp32, bf16, fp64; x and weight of one dtype)
// the CUDA kernel (runtime/kernels/fused_layers.h), else rms_norm_reference.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps = 1e-6);
// The eager formula (any device and dtype; statistics in fp32 for half/bf16).
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps = 1e-6);

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// The norm of a block (and of the model's embedding and output), by the skeleton key block_norm
// (docs/models.md#block-skeleton): "rmsnorm" = RMSNorm above (parameter "weight"), or "layernorm" =
// (x − mean) / sqrt(var + eps) · w + b over the last dim (parameters "weight" and "bias"; statistics in fp32 for
// half/bf16 inputs), as RWKV's blocks and flash-linear-attention's RWKV-7 model.
struct BlockNormImpl : torch::nn::Module {
  BlockNormImpl(int64_t dim, double eps, const std::string& kind);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;  // bias: layernorm only
  double eps;
  bool layer_norm;
};
TORCH_MODULE(BlockNorm);
// The kinds block_norm accepts: Error naming the value otherwise.
void check_block_norm_kind(const std::string& kind);

// I = 256 * ceil(floor(d * r * 2/3) / 256) (docs/models.md#block-skeleton, fla's rule).
int64_t swiglu_hidden_size(int64_t d_model, double ratio);

// SwiGLU(x) = W_down(SiLU(W_gate x) * W_up x), no biases. On the CPU (fp32/fp64) gate and up are one GEMM
// against their concatenated weights (the parameters stay two modules) and the gate is one fused kernel; on CUDA the
// gate is one CUDA kernel (runtime/kernels/fused_layers.h) between the two projections and W_down.
struct SwiGLUImpl : torch::nn::Module {
  SwiGLUImpl(int64_t d_model, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward_reference(const torch::Tensor& x);  // the eager formula
  torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(SwiGLU);

// Depthwise causal conv over time, kernel K, no bias, then SiLU (docs/models.md#shared-building-blocks).
// x: [B, T, C]. With a state, the last K-1 inputs are cached under `cache_key` ([B, C, K-1]).
struct ShortConvImpl : torch::nn::Module {
  ShortConvImpl(int64_t channels, int64_t kernel = 4, bool silu = true);
  torch::Tensor forward(const torch::Tensor& x, LayerState* state = nullptr,
                        const std::string& cache_key = "conv");
  // Packed sequences (docs/models.md#packed-sequences), x [1, N, C]: a tap that would reach back past the start of
  // its token's sequence reads zero, as the first K-1 tokens of a fresh sequence do.
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs);
  torch::Tensor weight;  // [C, 1, K]
  int64_t channels, kernel;
  bool silu;
};
TORCH_MODULE(ShortConv);

// Per-head gated RMSNorm: o_h = RMSNorm(y_h) * w * SiLU(g_h) (docs/models.md#shared-building-blocks). y, g: [B, T, H, Dv].
struct GatedRMSNormImpl : torch::nn::Module {
  GatedRMSNormImpl(int64_t head_dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& y, const torch::Tensor& g);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(GatedRMSNorm);

// l2norm(x) = x / sqrt(sum x^2 + eps) over the last dim (eps inside the sqrt, docs/models.md#shared-building-blocks).
torch::Tensor l2norm(const torch::Tensor& x, double eps = 1e-6);

// Rotate-half RoPE (docs/models.md#shared-building-blocks). x: [B, H, T, D]; positions start at `offset`. On the CPU (fp32/fp64, D even)
// one fused kernel, on CUDA (fp32, bf16, fp64) the CUDA kernel (runtime/kernels/fused_layers.h), else
// apply_rope_reference: x cos + rotate_half(x) sin.
torch::Tensor apply_rope(const torch::Tensor& x, int64_t offset, double theta = 10000.0);
torch::Tensor apply_rope_reference(const torch::Tensor& x, int64_t offset, double theta = 10000.0);
// RoPE on packed sequences (docs/models.md#packed-sequences): x [1, N, H, D] holds seqs' sequences back to back, and
// each token turns by its position inside its own sequence (apply_rope over each length group's padded rows).
torch::Tensor apply_rope_packed(const torch::Tensor& x, const PackedSequences& seqs, double theta = 10000.0);

}  // namespace mnemo
