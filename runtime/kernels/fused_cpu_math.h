// Vectorisable scalar code for the fused CPU kernels (runtime/kernels/fused_*.cpp; not a public header).
// The build targets plain x86-64 (SSE2); MNEMO_SIMD_CLONES compiles a hot loop twice more — for x86-64-v3 (AVX2,
// FMA) and x86-64-v4 (AVX-512) — and picks one at load time (GCC target_clones), elsewhere it is empty. The loops
// are written so that GCC vectorises them without -ffast-math: reductions keep kLanes partial sums, exp has no
// branch (fast_exp), inner helpers are forced inline into the cloned caller.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define MNEMO_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MNEMO_SIMD_CLONES
#endif
#define MNEMO_INLINE inline __attribute__((always_inline))

namespace mnemo::fused_cpu {

constexpr int kLanes = 16;  // partial sums per reduction (one AVX-512 register of fp32)

// Σ_i a_i b_i in kLanes partial sums (vectorises; the order differs from a serial sum by rounding only).
template <typename T>
MNEMO_INLINE T dot(const T* a, const T* b, int64_t n) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  T s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
MNEMO_INLINE T max_of(const T* a, int64_t n) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], a[i + l]);
  T m = -INFINITY;
  for (int l = 0; l < kLanes; ++l) m = std::max(m, acc[l]);
  for (; i < n; ++i) m = std::max(m, a[i]);
  return m;
}

// Bounds of fast_exp's argument as fp32 bit patterns: -87 (exp > the smallest normal) and 88 (< FLT_MAX).
// Handed in opaque (opaque_bounds) so that GCC cannot fold the clamped branch into a constant and give up
// vectorising the loop.
struct ExpBounds {
  uint32_t lo = 0xC2AE0000u, hi = 0x42B00000u;
};
MNEMO_INLINE ExpBounds opaque_bounds() {
  ExpBounds b;
  asm("" : "+r"(b.lo), "+r"(b.hi));
  return b;
}

// e^x in fp32 without branches: x clamped to [-87, 88] by integer compares on its bits (negative floats order
// as unsigned, positive ones as signed ints), x = n ln2 + r, e^r by Cephes' expf polynomial (max rel. error
// ~1.2e-7 against std::exp), 2^n by building the exponent bits. Non-finite arguments give what std::exp gives
// (NaN -> NaN, above ln FLT_MAX -> +inf), selected after the polynomial: the clamp alone would turn a NaN into
// e^88 or e^-87, and a softmax over NaN scores into finite probabilities where the eager formula gives NaN.
MNEMO_INLINE float fast_exp(float x, ExpBounds bounds) {
  const float x_in = x;
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = std::min(b, bounds.lo);
  b = static_cast<uint32_t>(std::min(static_cast<int32_t>(b), static_cast<int32_t>(bounds.hi)));
  std::memcpy(&x, &b, 4);
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to nearest
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const uint32_t e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  const float y = p * scale;
  return x_in != x_in ? x_in : (x_in > 88.72283935546875f ? INFINITY : y);  // ln FLT_MAX
}
// fp64 (the equivalence tests): the library exp.
MNEMO_INLINE double fast_exp(double x, ExpBounds) { return std::exp(x); }

// erf(x) given e = exp(-x²). fp32: Abramowitz & Stegun 7.1.26, erf|x| = 1 - t (a1 + t (a2 + … + t a5)) e with
// t = 1 / (1 + p|x|), |error| <= 1.5e-7 (the formula ATen's vectorised fp32 erf uses); fp64: the library erf.
MNEMO_INLINE float erf_given_exp(float x, float e) {
  const float t = 1.f / (1.f + 0.3275911f * std::fabs(x));
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                      0.254829592f) * t;
  return std::copysign(1.f - poly * e, x);
}
MNEMO_INLINE double erf_given_exp(double x, double) { return std::erf(x); }

// Φ = ½(1 + erf(h/√2)), φ = e^{-h²/2}/√(2π): value = hΦ, grad = Φ + hφ, pdf = φ, second = φ(2 - h²) (if asked).
template <typename T>
MNEMO_INLINE void gelu_rows(const T* h, T* value, T* grad, T* pdf, T* second, int64_t n) {
  const ExpBounds bounds = opaque_bounds();
  const T inv_sqrt2 = T(0.70710678118654752440), inv_sqrt_2pi = T(0.39894228040143267794);
  for (int64_t i = 0; i < n; ++i) {
    const T x = h[i], e = fast_exp(T(-0.5) * x * x, bounds);
    const T cdf = T(0.5) * (T(1) + erf_given_exp(x * inv_sqrt2, e)), phi = e * inv_sqrt_2pi;
    value[i] = x * cdf;
    grad[i] = cdf + x * phi;
    pdf[i] = phi;
  }
  if (second)
    for (int64_t i = 0; i < n; ++i) second[i] = pdf[i] * (T(2) - h[i] * h[i]);
}

}  // namespace mnemo::fused_cpu
