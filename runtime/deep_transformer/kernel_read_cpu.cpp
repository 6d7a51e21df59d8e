// The CPU form of DOT's read of the chunk-start memory (kernel_read_cpu.h). Per (b, h), with xs = s X [R, d]:
//   forward, per tile J of keys:  κ_J = exp(xs K_Jᵀ),  reads += κ_J a_J
//   backward, per tile:           ā_J = κ_Jᵀ ḡ,  Γ_J = (ḡ a_Jᵀ) ⊙ κ_J,  P += Γ_J K_J,  K̄_J += Γ_Jᵀ xs
//   then                          X̄ = s P,  s̄ = Σ_b Σ_r x_r · P_r.
// GEMMs through fused_cpu::gemm (the process's BLAS); exp and ⊙ as row loops compiled for AVX2/AVX-512 as well. The
// fp32 exp is fused_cpu::fast_exp (argument clamped to [-87, 88]; κ's argument s k̂·q̂ lies in [-s, s], s ≈ √d_h).
#include "runtime/deep_transformer/kernel_read_cpu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <vector>

#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_cpu_math.h"

namespace mnemo::kernel_read_cpu {

namespace {

using fused_cpu::gemm;
using torch::Tensor;

constexpr int64_t kTile = 256;  // keys per tile: with R ≈ 135 rows an fp32 tile is ~140 KB, in L2 with its operands

// The (b, h) matrix of a [B, H, rows, cols] tensor with a unit last stride (rows `ld` apart).
template <typename T>
struct Mat {
  T* p;
  int64_t s0, s1, ld;
  explicit Mat(const Tensor& t) : p(t.data_ptr<T>()), s0(t.stride(0)), s1(t.stride(1)), ld(t.stride(2)) {}
  T* at(int64_t b, int64_t h) const { return p + b * s0 + h * s1; }
};

MNEMO_SIMD_CLONES void exp_tile_f(float* t, int64_t rows, int64_t cols, int64_t ld) {
  const auto bounds = fused_cpu::opaque_bounds();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) t[r * ld + j] = fused_cpu::fast_exp(t[r * ld + j], bounds);
}
void exp_tile(float* t, int64_t rows, int64_t cols, int64_t ld) { exp_tile_f(t, rows, cols, ld); }
void exp_tile(double* t, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) t[r * ld + j] = std::exp(t[r * ld + j]);
}

template <typename T>
MNEMO_INLINE void mul_rows(T* g, int64_t ldg, const T* k, int64_t ldk, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) g[r * ldg + j] *= k[r * ldk + j];
}
MNEMO_SIMD_CLONES void mul_tile_f(float* g, int64_t ldg, const float* k, int64_t ldk, int64_t rows, int64_t cols) {
  mul_rows(g, ldg, k, ldk, rows, cols);
}
void mul_tile(float* g, int64_t ldg, const float* k, int64_t ldk, int64_t rows, int64_t cols) {
  mul_tile_f(g, ldg, k, ldk, rows, cols);
}
void mul_tile(double* g, int64_t ldg, const double* k, int64_t ldk, int64_t rows, int64_t cols) {
  mul_rows(g, ldg, k, ldk, rows, cols);
}

struct Dims {
  int64_t B, H, R, S0, d, dv;
};
Dims dims_of(const Tensor& x, int64_t S0, const Tensor& a) {
  return {x.size(0), x.size(1), x.size(2), S0, x.size(3), a.size(3)};
}

// s [.., H, ..] as one value per head (s_h at s[h · stride of H]).
template <typename T>
std::vector<T> per_head(const Tensor& s, int64_t H) {
  auto flat = s.reshape({H}).contiguous();
  const T* p = flat.data_ptr<T>();
  return std::vector<T>(p, p + H);
}

// xs = s_h x for one (b, h) into rows of width d.
template <typename T>
void scaled_rows(const Dims& z, const T* x, int64_t ldx, T sh, std::vector<T>& xs) {
  xs.resize(z.R * z.d);
  for (int64_t r = 0; r < z.R; ++r)
    for (int64_t j = 0; j < z.d; ++j) xs[r * z.d + j] = sh * x[r * ldx + j];
}

template <typename T>
void forward_typed(const Dims& z, const Tensor& x, const Tensor& keys, const Tensor& a, const Tensor& s,
                   const Tensor& reads, const Tensor& kappa) {
  const Mat<T> X(x), K(keys), A(a), Y(reads), Kap(kappa);
  const auto sh = per_head<T>(s, z.H);
  at::parallel_for(0, z.B * z.H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> xs;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / z.H, h = i % z.H;
      scaled_rows(z, X.at(b, h), X.ld, sh[h], xs);
      T *kap = Kap.at(b, h), *y = Y.at(b, h);
      const T *k = K.at(b, h), *av = A.at(b, h);
      for (int64_t j0 = 0; j0 < z.S0; j0 += kTile) {
        const int64_t n = std::min(kTile, z.S0 - j0);
        gemm<T>(false, true, z.R, n, z.d, 1, xs.data(), z.d, k + j0 * K.ld, K.ld, 0, kap + j0, Kap.ld);
        exp_tile(kap + j0, z.R, n, Kap.ld);
        gemm<T>(false, false, z.R, z.dv, n, 1, kap + j0, Kap.ld, av + j0 * A.ld, A.ld, j0 ? 1 : 0, y, Y.ld);
      }
    }
  });
}

template <typename T>
void backward_typed(const Dims& z, const Tensor& g, const Tensor& x, const Tensor& keys, const Tensor& a,
                    const Tensor& s, const Tensor& kappa, const Tensor& gx, const Tensor& ga, const Tensor& gs_bh,
                    const Tensor& gkeys) {
  const Mat<T> G(g), X(x), K(keys), A(a), Kap(kappa), GX(gx), GA(ga), GK(gkeys);
  const auto sh = per_head<T>(s, z.H);
  T* gs = gs_bh.data_ptr<T>();  // [B, H] contiguous
  at::parallel_for(0, z.B * z.H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> xs, P(z.R * z.d), gam(z.R * kTile);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / z.H, h = i % z.H;
      const T *x_bh = X.at(b, h), *gr = G.at(b, h), *kap = Kap.at(b, h), *k = K.at(b, h), *av = A.at(b, h);
      T *ga_bh = GA.at(b, h), *gk = GK.at(b, h);
      scaled_rows(z, x_bh, X.ld, sh[h], xs);
      for (int64_t j0 = 0; j0 < z.S0; j0 += kTile) {
        const int64_t n = std::min(kTile, z.S0 - j0);
        gemm<T>(true, false, n, z.dv, z.R, 1, kap + j0, Kap.ld, gr, G.ld, 0, ga_bh + j0 * GA.ld, GA.ld);  // ā = κᵀ ḡ
        gemm<T>(false, true, z.R, n, z.dv, 1, gr, G.ld, av + j0 * A.ld, A.ld, 0, gam.data(), kTile);   // ḡ aᵀ
        mul_tile(gam.data(), kTile, kap + j0, Kap.ld, z.R, n);                                         // ⊙ κ
        gemm<T>(false, false, z.R, z.d, n, 1, gam.data(), kTile, k + j0 * K.ld, K.ld, j0 ? 1 : 0, P.data(), z.d);
        gemm<T>(true, false, n, z.d, z.R, 1, gam.data(), kTile, xs.data(), z.d, 1, gk + j0 * GK.ld, GK.ld);
      }
      T* gx_bh = GX.at(b, h);
      T acc = 0;
      for (int64_t r = 0; r < z.R; ++r)
        for (int64_t j = 0; j < z.d; ++j) {
          gx_bh[r * GX.ld + j] = sh[h] * P[r * z.d + j];
          acc += x_bh[r * X.ld + j] * P[r * z.d + j];
        }
      gs[b * z.H + h] = acc;
    }
  });
}

}  // namespace

bool eligible(const Tensor& x, const Tensor& keys, const Tensor& a, const Tensor& s) {
  return fused_cpu_eligible({x, keys, a, s}) && x.dim() == 4 && keys.dim() == 4 && a.dim() == 4 &&
         s.numel() == x.size(1);
}

Forward forward(const Tensor& x_in, const Tensor& keys_in, int64_t S0, const Tensor& a_in, const Tensor& s) {
  RECORD_FUNCTION("mnemo::dot_read_forward", std::vector<c10::IValue>());
  const auto x = fused_cpu::unit_last_stride(x_in), keys = fused_cpu::unit_last_stride(keys_in),
             a = fused_cpu::unit_last_stride(a_in);
  const Dims z = dims_of(x, S0, a);
  Forward f{torch::empty({z.B, z.H, z.R, z.dv}, x.options()), torch::empty({z.B, z.H, z.R, S0}, x.options())};
  if (x.scalar_type() == torch::kFloat32) forward_typed<float>(z, x, keys, a, s, f.reads, f.kappa);
  else forward_typed<double>(z, x, keys, a, s, f.reads, f.kappa);
  return f;
}

Grads backward(const Tensor& grad_reads, const Tensor& x_in, const Tensor& keys_in, int64_t S0, const Tensor& a_in,
               const Tensor& s, const Tensor& kappa, const Tensor& keys_grad) {
  RECORD_FUNCTION("mnemo::dot_read_backward", std::vector<c10::IValue>());
  const auto x = fused_cpu::unit_last_stride(x_in), keys = fused_cpu::unit_last_stride(keys_in),
             a = fused_cpu::unit_last_stride(a_in), g = fused_cpu::unit_last_stride(grad_reads);
  const Dims z = dims_of(x, S0, a);
  Grads r{torch::empty({z.B, z.H, z.R, z.d}, x.options()), torch::empty({z.B, z.H, S0, z.dv}, x.options()),
          Tensor()};
  auto gs = torch::empty({z.B, z.H}, x.options());
  if (x.scalar_type() == torch::kFloat32)
    backward_typed<float>(z, g, x, keys, a, s, kappa, r.x, r.a, gs, keys_grad);
  else
    backward_typed<double>(z, g, x, keys, a, s, kappa, r.x, r.a, gs, keys_grad);
  r.s = gs.sum(0).reshape(s.sizes());
  return r;
}

}  // namespace mnemo::kernel_read_cpu
