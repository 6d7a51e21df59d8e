#include "runtime/layers.h"
#include "runtime/packed_sequences.h"

#include <cmath>

#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_layers.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  torch::nn::Linear lin(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard g;
  lin->weight.normal_(0.0, 0.02);
  if (bias) lin->bias.zero_();
  return lin;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool row_weight = x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1);
  if (row_weight && fused_cpu_eligible({x, weight})) return fused_rms_norm(x, weight, eps);
  if (row_weight && fused_layers_eligible({x, weight})) return rms_norm_fused_kernel(x, weight, eps);
  return rms_norm_reference(x, weight, eps);
}

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // fp32 statistics for half/bf16 inputs; fp64 stays fp64 (equivalence tests).
  auto xf = x.to(recurrence_dtype(x));
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (y * weight).to(x.scalar_type());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps); }

void check_block_norm_kind(const std::string& kind) {
  if (kind != "rmsnorm" && kind != "layernorm")
    throw Error("block_norm must be \"rmsnorm\" or \"layernorm\", got \"" + kind + "\"");
}

BlockNormImpl::BlockNormImpl(int64_t dim, double eps_, const std::string& kind) : eps(eps_) {
  check_block_norm_kind(kind);
  layer_norm = kind == "layernorm";
  weight = register_parameter("weight", torch::ones({dim}));
  if (layer_norm) bias = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor BlockNormImpl::forward(const torch::Tensor& x) {
  if (!layer_norm) return rms_norm(x, weight, eps);
  auto xf = x.to(recurrence_dtype(x));
  auto y = torch::layer_norm(xf, {xf.size(-1)}, weight.to(xf.scalar_type()), bias.to(xf.scalar_type()), eps);
  return y.to(x.scalar_type());
}

int64_t swiglu_hidden_size(int64_t d_model, double ratio) {
  int64_t base = static_cast<int64_t>(std::floor(d_model * ratio * 2.0 / 3.0));
  return 256 * ((base + 255) / 256);
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t hidden) {
  gate = register_module("gate", make_linear(d_model, hidden));
  up = register_module("up", make_linear(d_model, hidden));
  down = register_module("down", make_linear(hidden, d_model));
}
torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) {
  // Fused when it pays: with autograd, or over enough rows to outweigh concatenating the weights (not decode).
  const bool many_rows = x.dim() >= 1 && x.size(-1) > 0 && x.numel() / x.size(-1) >= 32;
  if ((many_rows || torch::GradMode::is_enabled()) && !gate->bias.defined() && !up->bias.defined() &&
      fused_cpu_eligible({x, gate->weight, up->weight})) {
    auto gate_up = torch::cat({gate->weight, up->weight}, 0);  // [2I, d]: one GEMM for both projections
    return down(fused_swiglu_gate(torch::matmul(x, gate_up.t())));
  }
  // CUDA: the two projections stay separate GEMMs (cuBLAS), the gate is one kernel instead of silu, mul and their
  // saved intermediates.
  if (!gate->bias.defined() && !up->bias.defined() && fused_layers_eligible({x, gate->weight, up->weight}))
    return down(swiglu_gate_fused_kernel(gate(x), up(x)));
  return forward_reference(x);
}
torch::Tensor SwiGLUImpl::forward_reference(const torch::Tensor& x) {
  return down(torch::silu(gate(x)) * up(x));
}

ShortConvImpl::ShortConvImpl(int64_t channels_, int64_t kernel_, bool silu_)
    : channels(channels_), kernel(kernel_), silu(silu_) {
  // PyTorch's Conv1d default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = K for depthwise.
  double bound = 1.0 / std::sqrt(static_cast<double>(kernel));
  weight = register_parameter("weight", torch::empty({channels, 1, kernel}).uniform_(-bound, bound));
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& x, LayerState* state,
                                     const std::string& cache_key) {
  // Causal depthwise conv, y_t = Σ_{j<K} w_j ⊙ x_{t-K+1+j} (cross-correlation over the K-1 cached
  // inputs and x), computed as K shifted multiply-adds in the [B, T, C] layout: on CPU this is
  // several times faster than a grouped conv1d and avoids two transposes. Cache layout [B, C, K-1].
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor prev;  // [B, K-1, C]
  if (state && state->has(cache_key)) {
    prev = state->at(cache_key).to(x.scalar_type()).transpose(1, 2);
  } else {
    prev = torch::zeros({B, kernel - 1, channels}, x.options());
  }
  auto full = torch::cat({prev, x}, 1);       // [B, K-1+T, C]
  // Taps as contiguous rows [K, C]: broadcasting a strided weight column is ~2x slower. Without
  // autograd the sum is accumulated in place (same operations and rounding as y = y + ...).
  auto w = weight.to(x.scalar_type()).squeeze(1).t().contiguous();  // [K, C]
  const bool in_place = !torch::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad());
  auto y = full.narrow(1, 0, T) * w[0];
  for (int64_t j = 1; j < kernel; ++j) {
    if (in_place) y.add_(full.narrow(1, j, T) * w[j]);
    else y = y + full.narrow(1, j, T) * w[j];
  }
  if (state) state->tensors[cache_key] = full.narrow(1, T, kernel - 1).transpose(1, 2).contiguous().detach();
  if (!silu) return y;
  return in_place ? torch::silu_(y) : torch::silu(y);
}

torch::Tensor ShortConvImpl::forward_packed(const torch::Tensor& x, const PackedSequences& seqs) {
  // y_t = Σ_{j<K} w_j ⊙ x_{t-K+1+j} · [t-K+1+j >= start of t's sequence]: tap j reaches back s = K-1-j tokens, so it
  // is kept where the token's position inside its sequence is at least s.
  const int64_t N = x.size(1);
  auto full = torch::cat({torch::zeros({1, kernel - 1, channels}, x.options()), x}, 1);  // [1, K-1+N, C]
  auto w = weight.to(x.scalar_type()).squeeze(1).t().contiguous();                          // [K, C]
  auto pos = seqs.positions.view({1, N, 1});
  torch::Tensor y;
  for (int64_t j = 0; j < kernel; ++j) {
    auto tap = full.narrow(1, j, N) * w[j];
    const int64_t reach = kernel - 1 - j;
    if (reach > 0) tap = tap * (pos >= reach).to(x.scalar_type());
    y = y.defined() ? y + tap : tap;
  }
  return silu ? torch::silu(y) : y;
}

GatedRMSNormImpl::GatedRMSNormImpl(int64_t head_dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({head_dim}));
}
torch::Tensor GatedRMSNormImpl::forward(const torch::Tensor& y, const torch::Tensor& g) {
  return rms_norm(y, weight, eps) * torch::silu(g);
}

torch::Tensor l2norm(const torch::Tensor& x, double eps) {
  return x * torch::rsqrt(x.pow(2).sum(-1, true) + eps);
}

namespace {
// The cos / sin tables of the last apply_rope call on this thread: q and k of one forward share
// them, so the second call reuses the first's (same values; fp64 angles are costly on CPU). CPU
// only: a thread_local device tensor would outlive the device runtime at exit.
struct RopeTables {
  int64_t offset = -1, T = -1, D = -1;
  double theta = 0;
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  torch::Tensor cos, sin;
};

// cos and sin [T, D] (each half repeated) for positions offset .. offset + T - 1, in x's dtype and device.
// `dtype` (default x's) is the tables' own: the CUDA kernel reads them in its arithmetic type.
std::pair<torch::Tensor, torch::Tensor> rope_tables(const torch::Tensor& x, int64_t offset, double theta,
                                                    c10::optional<torch::ScalarType> dtype = c10::nullopt) {
  const torch::ScalarType table_dtype = dtype.value_or(x.scalar_type());
  const int64_t T = x.size(2), D = x.size(3), half = D / 2;
  thread_local RopeTables tables;
  RopeTables local;
  // (Not under InferenceMode either: its tensors cannot be saved for a later backward.)
  auto& t = x.device().is_cpu() && !c10::InferenceMode::is_enabled() ? tables : local;
  if (!(t.cos.defined() && t.offset == offset && t.T == T && t.D == D &&
        t.theta == theta && t.dtype == table_dtype && t.device == x.device())) {
    torch::NoGradGuard no_grad;  // constants
    auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
    auto inv_freq = torch::pow(theta, -torch::arange(0, half, opts) * 2.0 / static_cast<double>(D));
    auto pos = torch::arange(offset, offset + T, opts);
    auto ang = torch::outer(pos, inv_freq);  // [T, half]
    auto c = ang.cos(), s = ang.sin();
    t = {offset, T, D, theta, table_dtype, x.device(), torch::cat({c, c}, -1).to(table_dtype),
         torch::cat({s, s}, -1).to(table_dtype)};
  }
  return {t.cos, t.sin};
}
}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, int64_t offset, double theta) {
  if (x.dim() == 4 && x.size(3) % 2 == 0 && fused_cpu_eligible({x})) {
    const auto [cos, sin] = rope_tables(x, offset, theta);
    return fused_rope(x, cos, sin);
  }
  if (x.dim() == 4 && x.size(3) % 2 == 0 && fused_layers_eligible({x})) {
    const auto [cos, sin] = rope_tables(x, offset, theta, x.scalar_type() == torch::kFloat64 ? torch::kFloat64
                                                                                            : torch::kFloat32);
    return rope_fused_kernel(x, cos, sin);
  }
  return apply_rope_reference(x, offset, theta);
}

torch::Tensor apply_rope_packed(const torch::Tensor& x, const PackedSequences& seqs, double theta) {
  const int64_t N = x.size(1), H = x.size(2), D = x.size(3);
  const auto flat = x.reshape({N, H * D});
  std::vector<torch::Tensor> parts;
  for (const auto& b : seqs.buckets) {
    auto rows = padded_rows(flat, b).view({b.rows, b.length, H, D}).transpose(1, 2);  // every row from position 0
    auto turned = apply_rope(rows, 0, theta).transpose(1, 2).reshape({b.rows, b.length, H * D});
    parts.push_back(unpad_rows(turned, b));
  }
  return unbucket_rows(parts, seqs).view({1, N, H, D});
}

torch::Tensor apply_rope_reference(const torch::Tensor& x, int64_t offset, double theta) {
  const auto [cos, sin] = rope_tables(x, offset, theta);
  const int64_t D = x.size(3), half = D / 2;
  auto x1 = x.slice(-1, 0, half), x2 = x.slice(-1, half, D);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

}  // namespace mnemo
