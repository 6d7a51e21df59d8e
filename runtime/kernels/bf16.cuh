// bfloat16 storage for block code (block_grid.cuh): the same 16 bits on both sides — __nv_bfloat16 on the device,
// at::BFloat16 (a uint16_t) on the host — with conversions that have a host form, so a host-run kernel reads and
// rounds bf16 exactly as the device does (round to nearest even; fp32 accumulation).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/kernels/block_grid.cuh"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace mnemo::grid {

struct bf16 {
  uint16_t bits;
};

MNEMO_HD float bf16_to_float(bf16 x) {
#if defined(__CUDA_ARCH__)
  __nv_bfloat16 h;
  memcpy(&h, &x, sizeof(h));
  return __bfloat162float(h);
#else
  const uint32_t wide = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
#endif
}

MNEMO_HD bf16 float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat16 h = __float2bfloat16_rn(f);
  bf16 x;
  memcpy(&x, &h, sizeof(x));
  return x;
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)  // NaN stays a (quiet) NaN
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{static_cast<uint16_t>(u >> 16)};
#endif
}

// Element loads and stores in the accumulation type Acc (float or double).
template <class Acc>
MNEMO_HD Acc load_as(const float* p) { return static_cast<Acc>(*p); }
template <class Acc>
MNEMO_HD Acc load_as(const double* p) { return static_cast<Acc>(*p); }
template <class Acc>
MNEMO_HD Acc load_as(const bf16* p) { return static_cast<Acc>(bf16_to_float(*p)); }

template <class Acc>
MNEMO_HD void store_as(float* p, Acc x) { *p = static_cast<float>(x); }
template <class Acc>
MNEMO_HD void store_as(double* p, Acc x) { *p = static_cast<double>(x); }
template <class Acc>
MNEMO_HD void store_as(bf16* p, Acc x) { *p = float_to_bf16(static_cast<float>(x)); }

// The store of a tile write (PrefetchedTile::write, for_lanes_batched): entry e of a bf16 tile ← bf16(value).
template <class Acc>
MNEMO_HD auto bf16_tile_store(bf16* tile) {
  return [tile](int e, Acc value) { store_as<Acc>(tile + e, value); };
}

// exp in the accumulation type (expf for float, exp for double) on both sides.
MNEMO_HD float exp_acc(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
MNEMO_HD double exp_acc(double x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return std::exp(x);
#endif
}

}  // namespace mnemo::grid
