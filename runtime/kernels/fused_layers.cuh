// Block code of the layer kernels (fused_layers_kernel.h): RMSNorm, the SwiGLU gate and RoPE, each one pass over
// memory forward and one backward, where eager LibTorch runs 4–8 kernels per layer and keeps their intermediates.
// Runs as CUDA kernels (fused_layers.cu) and, unchanged, over the sequential host grid (runtime/kernels/host_grid.h)
// in the CPU tests. E is the element type (float, double, grid::bf16), Acc the arithmetic (float, or double for
// double elements).
//
// RMSNorm over a row x of length D (runtime/layers.h rms_norm):
//   r = (Σ x_i² / D + ε)^-½,   y_i = x_i r w_i
//   backward, with g = dy ⊙ w and s = Σ_j g_j x_j:   dx_i = r g_i − x_i r³ s / D,   dw_i = Σ_rows dy_i x_i r
// SwiGLU gate on g, u:    h = g σ(g) u;   dg = dh u σ(g) (1 + g (1 − σ(g))),   du = dh g σ(g)
// RoPE (rotate-half): forward rotates each pair (x_i, x_{i+D/2}) by the angle of (t, i); backward by its negative.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/bf16.cuh"
#include "runtime/kernels/block_grid.cuh"
#include "runtime/kernels/fused_layers_kernel.h"

namespace mnemo::layers_kernel {

MNEMO_HD float inverse_sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return 1.0f / sqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}
MNEMO_HD double inverse_sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return 1.0 / sqrt(x);
#else
  return 1.0 / std::sqrt(x);
#endif
}

// Sum of partial[0 .. lanes.count) into partial[0] (lanes.count a power of two: the launchers' block size, or the
// host's single lane). Every lane reaches every barrier.
template <class Acc>
MNEMO_HD void block_sum(Acc* partial, grid::Lanes lanes) {
  for (int stride = lanes.count / 2; stride > 0; stride /= 2) {
    if (lanes.lane < stride) partial[lanes.lane] += partial[lanes.lane + stride];
    grid::barrier();
  }
}

// Dynamic shared memory of an RMSNorm block with `threads` lanes: one partial sum per lane.
template <class Acc>
MNEMO_HD std::size_t rms_norm_shared_bytes(int threads) {
  return grid::shared_bytes(sizeof(Acc) * static_cast<std::size_t>(threads));
}

template <class E, class Acc>
MNEMO_HD void rms_norm_forward_block(const RowProblem& p, const RmsNormForward& ptr, int64_t block, void* shared,
                                     grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  Acc* partial = arena.take<Acc>(static_cast<std::size_t>(lanes.count));
  const E* x = static_cast<const E*>(ptr.x);
  const E* w = static_cast<const E*>(ptr.w);
  E* y = static_cast<E*>(ptr.y);
  const int64_t first = block * p.rows_per_block;
  const int64_t last = first + p.rows_per_block < p.rows ? first + p.rows_per_block : p.rows;
  for (int64_t row = first; row < last; ++row) {
    const E* xr = x + row * p.dim;
    Acc sum = 0;
    MNEMO_FOR_LANES(i, p.dim, lanes) {
      const Acc v = grid::load_as<Acc>(xr + i);
      sum += v * v;
    }
    partial[lanes.lane] = sum;
    grid::barrier();
    block_sum(partial, lanes);
    const Acc r = inverse_sqrt(partial[0] / static_cast<Acc>(p.dim) + static_cast<Acc>(p.eps));
    MNEMO_FOR_LANES(i, p.dim, lanes) {
      grid::store_as(y + row * p.dim + i, grid::load_as<Acc>(xr + i) * r * grid::load_as<Acc>(w + i));
    }
    if (lanes.lane == 0 && ptr.rstd) static_cast<Acc*>(ptr.rstd)[row] = r;
    grid::barrier();  // partial[0] is read above before the next row overwrites it
  }
}

template <class E, class Acc>
MNEMO_HD void rms_norm_backward_block(const RowProblem& p, const RmsNormBackward& ptr, int64_t block, void* shared,
                                      grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  Acc* partial = arena.take<Acc>(static_cast<std::size_t>(lanes.count));
  const E* x = static_cast<const E*>(ptr.x);
  const E* w = static_cast<const E*>(ptr.w);
  const E* dy = static_cast<const E*>(ptr.dy);
  const Acc* rstd = static_cast<const Acc*>(ptr.rstd);
  E* dx = static_cast<E*>(ptr.dx);
  Acc* dw = ptr.dw_partial ? static_cast<Acc*>(ptr.dw_partial) + block * p.dim : nullptr;
  // Each lane owns the same columns i in every row: its dw entries need no exchange.
  if (dw) MNEMO_FOR_LANES(i, p.dim, lanes) { dw[i] = 0; }
  const int64_t first = block * p.rows_per_block;
  const int64_t last = first + p.rows_per_block < p.rows ? first + p.rows_per_block : p.rows;
  for (int64_t row = first; row < last; ++row) {
    const E* xr = x + row * p.dim;
    const E* dyr = dy + row * p.dim;
    const Acc r = rstd[row];
    if (dw) MNEMO_FOR_LANES(i, p.dim, lanes) { dw[i] += grid::load_as<Acc>(dyr + i) * grid::load_as<Acc>(xr + i) * r; }
    if (!dx) continue;
    Acc s = 0;
    MNEMO_FOR_LANES(i, p.dim, lanes) {
      s += grid::load_as<Acc>(dyr + i) * grid::load_as<Acc>(w + i) * grid::load_as<Acc>(xr + i);
    }
    partial[lanes.lane] = s;
    grid::barrier();
    block_sum(partial, lanes);
    const Acc c = r * r * r * partial[0] / static_cast<Acc>(p.dim);
    MNEMO_FOR_LANES(i, p.dim, lanes) {
      const Acc g = grid::load_as<Acc>(dyr + i) * grid::load_as<Acc>(w + i);
      grid::store_as(dx + row * p.dim + i, r * g - grid::load_as<Acc>(xr + i) * c);
    }
    grid::barrier();
  }
}

template <class Acc>
MNEMO_HD Acc sigmoid_acc(Acc g) {
  return static_cast<Acc>(1) / (static_cast<Acc>(1) + grid::exp_acc(-g));
}

template <class E, class Acc>
MNEMO_HD void swiglu_gate_forward_block(const GateProblem& p, const GatePointers& ptr, int64_t block, void*,
                                        grid::Lanes lanes) {
  const E* g = static_cast<const E*>(ptr.g);
  const E* u = static_cast<const E*>(ptr.u);
  E* h = static_cast<E*>(ptr.h);
  const int64_t first = block * p.items_per_block, total = p.rows * p.inner;
  const int64_t n = first + p.items_per_block < total ? p.items_per_block : total - first;
  MNEMO_FOR_LANES(j, n, lanes) {
    const int64_t item = first + j;
    const Acc gi = grid::load_as<Acc>(g + item);
    grid::store_as(h + item, gi * sigmoid_acc(gi) * grid::load_as<Acc>(u + item));
  }
}

template <class E, class Acc>
MNEMO_HD void swiglu_gate_backward_block(const GateProblem& p, const GatePointers& ptr, int64_t block, void*,
                                         grid::Lanes lanes) {
  const E* g = static_cast<const E*>(ptr.g);
  const E* u = static_cast<const E*>(ptr.u);
  const E* dh = static_cast<const E*>(ptr.dh);
  E* dg = static_cast<E*>(ptr.dg);
  E* du = static_cast<E*>(ptr.du);
  const int64_t first = block * p.items_per_block, total = p.rows * p.inner;
  const int64_t n = first + p.items_per_block < total ? p.items_per_block : total - first;
  MNEMO_FOR_LANES(j, n, lanes) {
    const int64_t item = first + j;
    const Acc gi = grid::load_as<Acc>(g + item), ui = grid::load_as<Acc>(u + item);
    const Acc d = grid::load_as<Acc>(dh + item), s = sigmoid_acc(gi);
    grid::store_as(dg + item, d * ui * s * (static_cast<Acc>(1) + gi * (static_cast<Acc>(1) - s)));
    grid::store_as(du + item, d * gi * s);
  }
}

template <class E, class Acc>
MNEMO_HD void rope_block(const RopeProblem& p, const RopePointers& ptr, int64_t block, void*, grid::Lanes lanes) {
  const E* x = static_cast<const E*>(ptr.x);
  const Acc* cos_table = static_cast<const Acc*>(ptr.cos);
  const Acc* sin_table = static_cast<const Acc*>(ptr.sin);
  E* y = static_cast<E*>(ptr.y);
  const int64_t half = p.dim / 2, rows = rope_rows(p), first = block * p.rows_per_block;
  const int64_t n_rows = first + p.rows_per_block < rows ? p.rows_per_block : rows - first;
  const Acc sign = p.inverse ? static_cast<Acc>(-1) : static_cast<Acc>(1);
  MNEMO_FOR_LANES(j, n_rows * half, lanes) {
    const int64_t row = first + j / half, i = j % half;
    const int64_t t = row % p.seq, h = (row / p.seq) % p.heads, b = row / (p.seq * p.heads);
    const E* xr = x + b * p.x_stride[0] + h * p.x_stride[1] + t * p.x_stride[2];
    E* yr = y + b * p.y_stride[0] + h * p.y_stride[1] + t * p.y_stride[2];
    const Acc c = cos_table[t * p.dim + i], s = sign * sin_table[t * p.dim + i];
    const Acc x1 = grid::load_as<Acc>(xr + i), x2 = grid::load_as<Acc>(xr + i + half);
    grid::store_as(yr + i, x1 * c - x2 * s);
    grid::store_as(yr + i + half, x2 * c + x1 * s);
  }
}

}  // namespace mnemo::layers_kernel
