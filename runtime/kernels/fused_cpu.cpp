// Fused CPU kernels (runtime/kernels/fused_cpu.h): the shared machinery (switch, eligibility, GEMM, the
// higher-order fallback) and the row-wise ops RMSNorm, SwiGLU gate and RoPE. Attention: fused_attention_cpu.cpp.
#include "runtime/kernels/fused_cpu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <cstdlib>
#include <string>

#include "core/torch_compat.h"
#include "runtime/kernels/fortran_blas.h"
#include "runtime/kernels/fused_cpu_math.h"

namespace mnemo {

namespace {
std::atomic<int>& fused_switch() {
  static std::atomic<int> on{[] {
    const char* env = std::getenv("MNEMO_FUSED_CPU");
    return env && std::string(env) == "0" ? 0 : 1;
  }()};
  return on;
}
}  // namespace

bool fused_cpu_enabled() { return fused_switch().load(std::memory_order_relaxed) != 0; }
void set_fused_cpu_enabled(bool on) { fused_switch().store(on ? 1 : 0); }

bool fused_cpu_eligible(at::ArrayRef<torch::Tensor> tensors) {
  if (!fused_cpu_enabled() || torch_compat::autocast_enabled(c10::DeviceType::CPU)) return false;
  c10::optional<torch::ScalarType> dtype;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!t.device().is_cpu() || t.is_sparse()) return false;
    if (t.scalar_type() != torch::kFloat32 && t.scalar_type() != torch::kFloat64) return false;
    if (dtype && *dtype != t.scalar_type()) return false;
    dtype = t.scalar_type();
  }
  return dtype.has_value();
}

namespace fused_cpu {

// ---- GEMM: the Fortran BLAS symbol LibTorch links (runtime/kernels/fortran_blas.h) -------------------------
namespace {
// A row-major matrix of `rows` × `cols` with row stride ld, as a (non-owning) tensor.
template <typename T>
torch::Tensor view_matrix(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return torch::from_blob(const_cast<T*>(p), {rows, cols}, {ld, 1},
                          torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
}
}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool fits = M < INT32_MAX && N < INT32_MAX && K < INT32_MAX && lda < INT32_MAX && ldb < INT32_MAX &&
                    ldc < INT32_MAX;
  if (K > 0 && fits) {
    if (auto fn = fortran_gemm<T>()) {
      // Column-major BLAS sees the row-major C as Cᵀ = op(B)ᵀ op(A)ᵀ.
      const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
      const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
      const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
      fn(&ta, &tb, &m, &n, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
      return;
    }
  }
  gemm_aten(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void gemm_aten(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  auto c = view_matrix(C, M, N, ldc);
  auto a = trans_a ? view_matrix(A, K, M, lda).t() : view_matrix(A, M, K, lda);
  auto b = trans_b ? view_matrix(B, N, K, ldb).t() : view_matrix(B, K, N, ldb);
  c.addmm_(a, b, beta, alpha);  // beta = 0 ignores C's old values, as BLAS does
}

bool blas_found() { return fortran_gemm<float>() != nullptr && fortran_gemm<double>() != nullptr; }

#define MNEMO_GEMM_INSTANCES(name, T)                                                                        \
  template void name<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*, \
                        int64_t);
MNEMO_GEMM_INSTANCES(gemm, float)
MNEMO_GEMM_INSTANCES(gemm, double)
MNEMO_GEMM_INSTANCES(gemm_aten, float)
MNEMO_GEMM_INSTANCES(gemm_aten, double)
#undef MNEMO_GEMM_INSTANCES

torch::Tensor unit_last_stride(const torch::Tensor& t) {
  return t.dim() == 0 || t.stride(-1) == 1 ? t : t.contiguous();
}

namespace {
// Dims laid out in the order of t's strides (empty_like_layout without its unit-last-stride rule).
torch::Tensor empty_like_strides(const torch::Tensor& t) {
  if (t.is_non_overlapping_and_dense()) return torch::empty_like(t);
  const int64_t n = t.dim();
  std::vector<int64_t> order(n), outer_sizes, inverse(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  for (int64_t i = 0; i < n; ++i) {
    outer_sizes.push_back(t.size(order[i]));
    inverse[order[i]] = i;
  }
  return torch::empty(outer_sizes, t.options()).permute(inverse);
}
}  // namespace

torch::Tensor empty_like_layout(const torch::Tensor& t) {
  auto y = empty_like_strides(t);
  return y.dim() == 0 || y.stride(-1) == 1 ? y : torch::empty_like(t, at::MemoryFormat::Contiguous);
}

torch::autograd::variable_list reference_backward(
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& reference,
    const std::vector<torch::Tensor>& inputs, const torch::Tensor& grad_output) {
  std::vector<torch::Tensor> wrt;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  torch::autograd::variable_list out(inputs.size());
  if (wrt.empty()) return out;
  auto y = reference(inputs);
  auto grads = torch::autograd::grad({y}, wrt, {grad_output}, /*retain_graph=*/true, /*create_graph=*/true,
                                     /*allow_unused=*/true);
  size_t g = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) out[i] = grads[g++];
  return out;
}

}  // namespace fused_cpu

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace fused_cpu;

namespace {

// Rows per parallel task: about 16K elements.
int64_t grain_rows(int64_t row_len) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_len)); }

// Runs the block with T = float or double after `dtype` (the only dtypes fused_cpu_eligible lets through).
#define MNEMO_FOR_FLOAT_AND_DOUBLE(T, ...) \
  if (dtype == torch::kFloat32) {          \
    using T = float;                       \
    __VA_ARGS__                            \
  } else {                                 \
    using T = double;                      \
    __VA_ARGS__                            \
  }

// ---- RMSNorm ----------------------------------------------------------------------------------------------
// Forward per row: r = (Σx²/D + eps)^-½, y = (x r) w; r is kept for the backward.
template <typename T>
MNEMO_INLINE void rms_norm_rows(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t D, T eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* xi = x + i * D;
    T* yi = y + i * D;
    const T r = T(1) / std::sqrt(dot(xi, xi, D) / T(D) + eps);
    rstd[i] = r;
    for (int64_t j = 0; j < D; ++j) yi[j] = xi[j] * r * w[j];
  }
}
// Backward per row: x̂ = x r, c = Σ_j x̂_j w_j g_j / D, dx = r (w g − x̂ c); dw_part += g x̂.
template <typename T>
MNEMO_INLINE void rms_norm_backward_rows(const T* x, const T* w, const T* rstd, const T* g, T* dx, T* dw_part,
                                         int64_t rows, int64_t D) {
  for (int64_t i = 0; i < rows; ++i) {
    const T *xi = x + i * D, *gi = g + i * D;
    const T r = rstd[i];
    if (dx) {
      T acc[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= D; j += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += xi[j + l] * w[j + l] * gi[j + l];
      T s = 0;
      for (int l = 0; l < kLanes; ++l) s += acc[l];
      for (; j < D; ++j) s += xi[j] * w[j] * gi[j];
      const T c = s * r / T(D);  // Σ x̂ w g / D
      T* dxi = dx + i * D;
      for (j = 0; j < D; ++j) dxi[j] = r * (w[j] * gi[j] - xi[j] * r * c);
    }
    if (dw_part)
      for (int64_t j = 0; j < D; ++j) dw_part[j] += gi[j] * (xi[j] * r);
  }
}
MNEMO_SIMD_CLONES void rms_norm_rows_f(const float* x, const float* w, float* y, float* r, int64_t n, int64_t D,
                                       float eps) {
  rms_norm_rows(x, w, y, r, n, D, eps);
}
MNEMO_SIMD_CLONES void rms_norm_rows_d(const double* x, const double* w, double* y, double* r, int64_t n,
                                       int64_t D, double eps) {
  rms_norm_rows(x, w, y, r, n, D, eps);
}
MNEMO_SIMD_CLONES void rms_norm_backward_rows_f(const float* x, const float* w, const float* r, const float* g,
                                                float* dx, float* dw, int64_t n, int64_t D) {
  rms_norm_backward_rows(x, w, r, g, dx, dw, n, D);
}
MNEMO_SIMD_CLONES void rms_norm_backward_rows_d(const double* x, const double* w, const double* r,
                                                const double* g, double* dx, double* dw, int64_t n, int64_t D) {
  rms_norm_backward_rows(x, w, r, g, dx, dw, n, D);
}
void rms_norm_rows_any(const float* x, const float* w, float* y, float* r, int64_t n, int64_t D, double eps) {
  rms_norm_rows_f(x, w, y, r, n, D, static_cast<float>(eps));
}
void rms_norm_rows_any(const double* x, const double* w, double* y, double* r, int64_t n, int64_t D, double eps) {
  rms_norm_rows_d(x, w, y, r, n, D, eps);
}
void rms_norm_backward_any(const float* x, const float* w, const float* r, const float* g, float* dx, float* dw,
                           int64_t n, int64_t D) {
  rms_norm_backward_rows_f(x, w, r, g, dx, dw, n, D);
}
void rms_norm_backward_any(const double* x, const double* w, const double* r, const double* g, double* dx,
                           double* dw, int64_t n, int64_t D) {
  rms_norm_backward_rows_d(x, w, r, g, dx, dw, n, D);
}

torch::Tensor rms_norm_eager(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

struct RMSNormFn : torch::autograd::Function<RMSNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in,
                               double eps) {
    RECORD_FUNCTION("mnemo::fused_rms_norm", std::vector<c10::IValue>());
    auto x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t D = x.size(-1), rows = D == 0 ? 0 : x.numel() / D;
    auto y = torch::empty_like(x, at::MemoryFormat::Contiguous);
    auto rstd = torch::empty({rows}, x.options());
    const auto dtype = x.scalar_type();
    MNEMO_FOR_FLOAT_AND_DOUBLE(T, {
      const T *px = x.data_ptr<T>(), *pw = w.data_ptr<T>();
      T *py = y.data_ptr<T>(), *pr = rstd.data_ptr<T>();
      at::parallel_for(0, rows, grain_rows(D), [&](int64_t b, int64_t e) {
        rms_norm_rows_any(px + b * D, pw, py + b * D, pr + b, e - b, D, eps);
      });
    });
    ctx->save_for_backward({x_in, w_in, x, rstd});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate the eager formula
      auto g = reference_backward([&](const std::vector<torch::Tensor>& in) { return rms_norm_eager(in[0], in[1], eps); },
                                  {saved[0], saved[1]}, grads[0]);
      return {g[0], g[1], torch::Tensor()};
    }
    const auto &x = saved[2], &w_in = saved[1], &rstd = saved[3];
    auto w = w_in.contiguous();
    auto g = grads[0].contiguous();
    const int64_t D = x.size(-1), rows = D == 0 ? 0 : x.numel() / D;
    const bool need_dx = ctx->needs_input_grad(0), need_dw = ctx->needs_input_grad(1);
    torch::Tensor dx, dw;
    if (need_dx) dx = torch::empty_like(x, at::MemoryFormat::Contiguous);
    // dw = Σ over rows, in a fixed number of row chunks (independent of the thread count: deterministic).
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(256, (rows + 63) / 64));
    const int64_t chunk = (rows + chunks - 1) / std::max<int64_t>(1, chunks);
    torch::Tensor dw_parts;
    if (need_dw) dw_parts = torch::zeros({chunks, D}, x.options());
    const auto dtype = x.scalar_type();
    MNEMO_FOR_FLOAT_AND_DOUBLE(T, {
      const T *px = x.data_ptr<T>(), *pw = w.data_ptr<T>(), *pr = rstd.data_ptr<T>(), *pg = g.data_ptr<T>();
      T* pdx = need_dx ? dx.data_ptr<T>() : nullptr;
      T* pdw = need_dw ? dw_parts.data_ptr<T>() : nullptr;
      at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
        for (int64_t c = cb; c < ce; ++c) {
          const int64_t b = c * chunk, e = std::min(rows, b + chunk);
          if (b >= e) continue;
          rms_norm_backward_any(px + b * D, pw, pr + b, pg + b * D, pdx ? pdx + b * D : nullptr,
                                pdw ? pdw + c * D : nullptr, e - b, D);
        }
      });
    });
    if (need_dw) dw = dw_parts.sum(0).view(w_in.sizes());
    if (need_dx) dx = dx.view(x.sizes());
    return {dx, dw, torch::Tensor()};
  }
};

// ---- SwiGLU gate ---------------------------------------------------------------------------------------------
// h = g σ(g) u with σ(g) = 1 / (1 + e^-g).
template <typename T>
MNEMO_INLINE void swiglu_rows(const T* gu, T* h, int64_t rows, int64_t I) {
  const ExpBounds bounds = opaque_bounds();
  for (int64_t i = 0; i < rows; ++i) {
    const T *g = gu + i * 2 * I, *u = g + I;
    T* hi = h + i * I;
    for (int64_t j = 0; j < I; ++j) hi[j] = g[j] / (T(1) + fast_exp(-g[j], bounds)) * u[j];
  }
}
// dg = dh u σ (1 + g (1 − σ)), du = dh g σ.
template <typename T>
MNEMO_INLINE void swiglu_backward_rows(const T* gu, const T* dh, T* dgu, int64_t rows, int64_t I) {
  const ExpBounds bounds = opaque_bounds();
  for (int64_t i = 0; i < rows; ++i) {
    const T *g = gu + i * 2 * I, *u = g + I, *dhi = dh + i * I;
    T *dg = dgu + i * 2 * I, *du = dg + I;
    for (int64_t j = 0; j < I; ++j) {
      const T s = T(1) / (T(1) + fast_exp(-g[j], bounds));
      du[j] = dhi[j] * g[j] * s;
      dg[j] = dhi[j] * u[j] * s * (T(1) + g[j] * (T(1) - s));
    }
  }
}
MNEMO_SIMD_CLONES void swiglu_rows_f(const float* gu, float* h, int64_t n, int64_t I) { swiglu_rows(gu, h, n, I); }
MNEMO_SIMD_CLONES void swiglu_rows_d(const double* gu, double* h, int64_t n, int64_t I) { swiglu_rows(gu, h, n, I); }
MNEMO_SIMD_CLONES void swiglu_backward_rows_f(const float* gu, const float* dh, float* dgu, int64_t n, int64_t I) {
  swiglu_backward_rows(gu, dh, dgu, n, I);
}
MNEMO_SIMD_CLONES void swiglu_backward_rows_d(const double* gu, const double* dh, double* dgu, int64_t n,
                                              int64_t I) {
  swiglu_backward_rows(gu, dh, dgu, n, I);
}
void swiglu_any(const float* gu, float* h, int64_t n, int64_t I) { swiglu_rows_f(gu, h, n, I); }
void swiglu_any(const double* gu, double* h, int64_t n, int64_t I) { swiglu_rows_d(gu, h, n, I); }
void swiglu_backward_any(const float* gu, const float* dh, float* dgu, int64_t n, int64_t I) {
  swiglu_backward_rows_f(gu, dh, dgu, n, I);
}
void swiglu_backward_any(const double* gu, const double* dh, double* dgu, int64_t n, int64_t I) {
  swiglu_backward_rows_d(gu, dh, dgu, n, I);
}

torch::Tensor swiglu_eager(const torch::Tensor& gu) {
  auto parts = gu.chunk(2, -1);
  return torch::silu(parts[0]) * parts[1];
}

struct SwiGLUGateFn : torch::autograd::Function<SwiGLUGateFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gu_in) {
    RECORD_FUNCTION("mnemo::fused_swiglu_gate", std::vector<c10::IValue>());
    auto gu = gu_in.contiguous();
    const int64_t I = gu.size(-1) / 2, rows = I == 0 ? 0 : gu.numel() / (2 * I);
    auto shape = gu.sizes().vec();
    shape.back() = I;
    auto h = torch::empty(shape, gu.options());
    const auto dtype = gu.scalar_type();
    MNEMO_FOR_FLOAT_AND_DOUBLE(T, {
      const T* pg = gu.data_ptr<T>();
      T* ph = h.data_ptr<T>();
      at::parallel_for(0, rows, grain_rows(2 * I),
                       [&](int64_t b, int64_t e) { swiglu_any(pg + b * 2 * I, ph + b * I, e - b, I); });
    });
    ctx->save_for_backward({gu_in, gu});
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (torch::GradMode::is_enabled())
      return reference_backward([](const std::vector<torch::Tensor>& in) { return swiglu_eager(in[0]); },
                                {saved[0]}, grads[0]);
    const auto& gu = saved[1];
    auto dh = grads[0].contiguous();
    const int64_t I = gu.size(-1) / 2, rows = I == 0 ? 0 : gu.numel() / (2 * I);
    auto dgu = torch::empty_like(gu, at::MemoryFormat::Contiguous);
    const auto dtype = gu.scalar_type();
    MNEMO_FOR_FLOAT_AND_DOUBLE(T, {
      const T *pg = gu.data_ptr<T>(), *pdh = dh.data_ptr<T>();
      T* pd = dgu.data_ptr<T>();
      at::parallel_for(0, rows, grain_rows(2 * I), [&](int64_t b, int64_t e) {
        swiglu_backward_any(pg + b * 2 * I, pdh + b * I, pd + b * 2 * I, e - b, I);
      });
    });
    return {dgu};
  }
};

// ---- RoPE ------------------------------------------------------------------------------------------------------
// One row of D = 2·half: y_i = x_i c_i − x_{i+half} s_i, y_{i+half} = x_{i+half} c_i + x_i s_i. With sign = −1
// it is the inverse rotation (the backward: sin negated).
template <typename T>
MNEMO_INLINE void rope_row(const T* x, T* y, const T* c, const T* s, int64_t half, T sign) {
  for (int64_t i = 0; i < half; ++i) {
    const T a = x[i], b = x[i + half], si = sign * s[i];
    y[i] = a * c[i] - b * si;
    y[i + half] = b * c[i] + a * si;
  }
}

// Rows of a [B, H, T, D] tensor with strides (s0, s1, s2, 1).
struct RowStrides {
  int64_t H, T, s0, s1, s2;
  int64_t offset(int64_t row) const { return (row / (H * T)) * s0 + ((row / T) % H) * s1 + (row % T) * s2; }
};

template <typename T>
MNEMO_INLINE void rope_rows(const T* x, RowStrides xs, T* y, RowStrides ys, const T* cos, const T* sin,
                            int64_t D, int64_t b, int64_t e, T sign) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t t = r % xs.T;
    rope_row(x + xs.offset(r), y + ys.offset(r), cos + t * D, sin + t * D, D / 2, sign);
  }
}
MNEMO_SIMD_CLONES void rope_rows_f(const float* x, RowStrides xs, float* y, RowStrides ys, const float* c,
                                   const float* s, int64_t D, int64_t b, int64_t e, float sign) {
  rope_rows(x, xs, y, ys, c, s, D, b, e, sign);
}
MNEMO_SIMD_CLONES void rope_rows_d(const double* x, RowStrides xs, double* y, RowStrides ys, const double* c,
                                   const double* s, int64_t D, int64_t b, int64_t e, double sign) {
  rope_rows(x, xs, y, ys, c, s, D, b, e, sign);
}
void rope_any(const float* x, RowStrides xs, float* y, RowStrides ys, const float* c, const float* s, int64_t D,
              int64_t b, int64_t e, float sign) {
  rope_rows_f(x, xs, y, ys, c, s, D, b, e, sign);
}
void rope_any(const double* x, RowStrides xs, double* y, RowStrides ys, const double* c, const double* s,
              int64_t D, int64_t b, int64_t e, double sign) {
  rope_rows_d(x, xs, y, ys, c, s, D, b, e, sign);
}

RowStrides row_strides(const torch::Tensor& t) {
  return {t.size(1), t.size(2), t.stride(0), t.stride(1), t.stride(2)};
}

// y = rotate(x) (sign +1) or its inverse (sign −1), laid out like x (empty_like_layout).
torch::Tensor rope_apply(const torch::Tensor& x_in, const torch::Tensor& cos_in, const torch::Tensor& sin_in,
                         double sign) {
  auto x = unit_last_stride(x_in);
  auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  auto y = empty_like_layout(x);
  const int64_t D = x.size(3), rows = x.size(0) * x.size(1) * x.size(2);
  const RowStrides xs = row_strides(x), ys = row_strides(y);
  const auto dtype = x.scalar_type();
  MNEMO_FOR_FLOAT_AND_DOUBLE(T, {
    const T *px = x.data_ptr<T>(), *pc = cos.data_ptr<T>(), *ps = sin.data_ptr<T>();
    T* py = y.data_ptr<T>();
    at::parallel_for(0, rows, grain_rows(D), [&](int64_t b, int64_t e) {
      rope_any(px, xs, py, ys, pc, ps, D, b, e, static_cast<T>(sign));
    });
  });
  return y;
}

torch::Tensor rope_eager(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    RECORD_FUNCTION("mnemo::fused_rope", std::vector<c10::IValue>());
    ctx->save_for_backward({cos, sin});
    return rope_apply(x, cos, sin, 1.0);
  }
  // dx = the inverse rotation of g (sin negated); under create_graph the same in eager ops (linear in g).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto dx = torch::GradMode::is_enabled() ? rope_eager(grads[0], saved[0], -saved[1])
                                            : rope_apply(grads[0], saved[0], saved[1], -1.0);
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RMSNormFn::apply(x, weight, eps);
}

torch::Tensor fused_swiglu_gate(const torch::Tensor& gu) { return SwiGLUGateFn::apply(gu); }

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "fused_rope: x must be [B, H, T, D] with D even");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == x.size(2) && cos.size(1) == x.size(3) && sin.sizes() == cos.sizes(),
              "fused_rope: cos/sin must be [T, D]");
  return RopeFn::apply(x, cos.detach(), sin.detach());
}

}  // namespace mnemo
