// CUDA kernel of Mamba's selective scan (arXiv 2312.00752 §3.2, Algorithm 2; docs/models.md#mamba), forward and
// backward, as block code (runtime/kernels/block_grid.cuh): the same functions run as CUDA kernels (scan_kernel.cu)
// and, over a sequential grid, on the host (scan_kernel_node.cpp), where the CPU tests check them against the
// token-by-token and chunked scans in fp64 and fp32 (tests/test_cuda_kernels_mamba.cpp). On a GPU it replaces the
// doubling scan, which forms a, b and h of size [B, T, D, N].
//
// Per channel d and state entry n the recurrence is independent of every other (d, n):
//   h_t[d, n] = a_t[d, n] h_{t−1}[d, n] + Δ_t[d] x_t[d] B_t[n],   a_t[d, n] = exp(Δ_t[d] A[d, n]),
//   y_t[d] = Σ_n C_t[n] h_t[d, n].
// A block is one batch row and a tile of `ch` channels; its work items are the tile's (channel, entry) pairs,
// item = n·ch + j for channel d0 + j, so that neighbouring lanes read neighbouring channels. The sequence runs in
// chunks of C steps: in a chunk every item runs its own recurrence over the C steps (no barrier between items) and
// writes its terms C_t[n] h_t[d, n] to the workspace; after a barrier the tile's outputs y_t[d] are the sums of those
// terms over n. The forward keeps the state at every chunk start (`ckpt`, [B, chunks, D, N]); the backward takes the
// chunks in reverse, recomputes a chunk's states from its checkpoint, and runs the adjoint per item,
//   G_t = g_t + ȳ_t[d] C_t[n]          (g_t: what h_t receives from later steps, g_T = h̄_T)
//   ā_t = G_t h_{t−1},  g_{t−1} = G_t a_t,
//   Δ̄_t[d] = Σ_n (ā_t a_t A[d, n] + G_t x_t[d] B_t[n]),   x̄_t[d] = Σ_n G_t Δ_t[d] B_t[n],
//   Ā[d, n] = Σ_t ā_t a_t Δ_t[d],   B̄_t[n] = Σ_d G_t Δ_t[d] x_t[d],   C̄_t[n] = Σ_d ȳ_t[d] h_t[d, n],
// writing each step's terms to the workspace; after a barrier the sums over n (Δ̄, x̄) and over the tile's channels
// (B̄, C̄: one partial per tile, summed over tiles by the caller) are formed. Ā sums per sequence (summed over them by
// the caller). Every tensor is contiguous in Acc (fp32 or fp64).
//
// Sequences: the rows of [B, T, ·] tensors, or, with `cu_seqlens` (int32 [S + 1], fla's convention), S sequences
// packed back to back along one time axis ([1, total, ·]), each from a zero state (docs/models.md#packed-sequences);
// blocks then run one sequence each, so a document never waits on the one before it. Checkpoint slots: sequence s's
// chunks start at slot ⌊bos_s / C⌋ + s (packed) or s · ⌈T / C⌉ (rows), which leaves room for its ⌈len_s / C⌉ chunks
// before the next sequence's first.
#pragma once

#include <cstdint>

#include "runtime/kernels/bf16.cuh"  // exp_acc
#include "runtime/kernels/block_grid.cuh"

namespace mnemo::mamba_kernel {

using grid::Lanes;

constexpr int kThreads = 256;
constexpr int kItemsPerBlock = 1024;  // channels a tile: kItemsPerBlock / N (at least one)

struct Dims {
  int64_t blocks;  // S · tiles
  int S;           // sequences: the batch rows, or the packed sequences (cu_seqlens)
  int T;           // steps a row (rows); tokens in all (packed)
  int D, N;
  int C;          // steps a chunk (the checkpoint interval)
  int ch;         // channels a tile
  int tiles;      // ceil(D / ch)
  int64_t slots;  // checkpoint slots: S · ceil(T / C) (rows), floor(T / C) + S (packed)
};

// Rows: S rows of T steps. Packed: S sequences, T tokens in all (pass packed = true).
inline Dims make_dims(int S, int T, int D, int N, int C, bool packed = false) {
  Dims z{};
  z.S = S, z.T = T, z.D = D, z.N = N, z.C = C < 1 ? 1 : C;
  const int per_tile = kItemsPerBlock / N;
  z.ch = per_tile < 1 ? 1 : (per_tile < D ? per_tile : D);
  z.tiles = (D + z.ch - 1) / z.ch;
  z.slots = packed ? static_cast<int64_t>(T / z.C) + S : static_cast<int64_t>(S) * ((T + z.C - 1) / z.C);
  z.blocks = static_cast<int64_t>(S) * z.tiles;
  return z;
}

MNEMO_HD int64_t items(const Dims& z) { return static_cast<int64_t>(z.ch) * z.N; }
// Workspace: the running state of every item, and C rows of one term per item.
MNEMO_HD int64_t forward_work(const Dims& z) { return (static_cast<int64_t>(z.C) + 1) * items(z); }
// Workspace: the adjoint carried between chunks; the chunk's states (C + 1 rows, row τ + 1 then reused for the terms
// of C̄); three rows of terms per step (of Δ̄, x̄, B̄).
MNEMO_HD int64_t backward_work(const Dims& z) { return (4 * static_cast<int64_t>(z.C) + 2) * items(z); }

// Token-major tensors ([B, T, ·] or [1, total, ·]) are indexed by token row: a sequence's step t is row bos + t.
template <class Acc>
struct ForwardArgs {
  Dims z;
  const int* cu_seqlens;                 // [S + 1] (packed), null (rows)
  const Acc *x, *dt, *A, *Bm, *Cm, *h0;  // [rows, D], [rows, D], [D, N], [rows, N], [rows, N], [S, D, N] (null: zeros)
  Acc *y, *hT;                           // [rows, D], [S, D, N] (null: not written)
  Acc* ckpt;                             // [slots, D, N]: the state at each chunk start (null: not kept)
  Acc* work;
};

template <class Acc>
struct BackwardArgs {
  ForwardArgs<Acc> x;         // inputs and checkpoints (outputs and x.work unused)
  const Acc *dy, *dhT;        // [rows, D], [S, D, N] (null: zeros)
  Acc *dx, *ddt, *dh0;        // [rows, D], [rows, D], [S, D, N] (null: not written)
  Acc* dA_seqs;               // [S, D, N]: Ā of each sequence
  Acc *dB_tiles, *dC_tiles;   // [tiles, rows, N]: B̄, C̄ of each tile
  Acc* work;
};

// Where block `block` sits: sequence s (its first token row bos, len steps, first checkpoint slot), channels
// [d0, d0 + width).
struct Tile {
  int64_t s, bos, len, slot0;
  int d0, width;
  int chunks;
};
MNEMO_HD Tile tile_of(const Dims& z, const int* cu_seqlens, int64_t block) {
  Tile tl{};
  tl.s = block / z.tiles;
  tl.d0 = static_cast<int>(block % z.tiles) * z.ch;
  tl.width = z.D - tl.d0 < z.ch ? z.D - tl.d0 : z.ch;
  if (cu_seqlens) {
    tl.bos = cu_seqlens[tl.s], tl.len = cu_seqlens[tl.s + 1] - tl.bos;
    tl.slot0 = tl.bos / z.C + tl.s;
  } else {
    tl.bos = tl.s * z.T, tl.len = z.T;
    tl.slot0 = tl.s * ((z.T + z.C - 1) / z.C);
  }
  tl.chunks = static_cast<int>((tl.len + z.C - 1) / z.C);
  return tl;
}
// Rows of token-major tensors: S · T (rows) or the packed total.
MNEMO_HD int64_t token_rows(const Dims& z, const int* cu_seqlens) {
  return cu_seqlens ? cu_seqlens[z.S] : static_cast<int64_t>(z.S) * z.T;
}

// ---- forward ------------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void forward_block(const ForwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const Dims& z = a.z;
  const Tile tl = tile_of(z, a.cu_seqlens, block);
  const int64_t D = z.D, N = z.N, ch = z.ch, I = items(z), s = tl.s, bos = tl.bos;
  Acc *state = a.work + block * forward_work(z), *terms = state + I;
  MNEMO_FOR_LANES(item, I, lanes) {
    const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
    if (j < tl.width) state[item] = a.h0 ? a.h0[(s * D + tl.d0 + j) * N + n] : Acc(0);
  }
  grid::barrier();
  for (int c = 0; c < tl.chunks; ++c) {
    const int64_t t0 = static_cast<int64_t>(c) * z.C, len = tl.len - t0 < z.C ? tl.len - t0 : z.C;
    MNEMO_FOR_LANES(item, I, lanes) {
      const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
      if (j >= tl.width) continue;
      const int64_t d = tl.d0 + j;
      const Acc An = a.A[d * N + n];
      Acc h = state[item];
      if (a.ckpt) a.ckpt[((tl.slot0 + c) * D + d) * N + n] = h;
      for (int64_t tau = 0; tau < len; ++tau) {
        const int64_t row = bos + t0 + tau, i = row * D + d, r = row * N + n;
        const Acc step = a.dt[i];
        h = grid::exp_acc(step * An) * h + step * a.x[i] * a.Bm[r];  // h_t = e^{Δ_t A} h_{t−1} + Δ_t x_t B_t
        terms[tau * I + item] = a.Cm[r] * h;
      }
      state[item] = h;
    }
    grid::barrier();
    MNEMO_FOR_LANES(e, len * tl.width, lanes) {  // y_t[d] = Σ_n C_t[n] h_t[d, n]
      const int64_t tau = e / tl.width, j = e % tl.width;
      Acc sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += terms[tau * I + n * ch + j];
      a.y[(bos + t0 + tau) * D + tl.d0 + j] = sum;
    }
    grid::barrier();
  }
  if (a.hT)
    MNEMO_FOR_LANES(item, I, lanes) {
      const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
      if (j < tl.width) a.hT[(s * D + tl.d0 + j) * N + n] = state[item];
    }
}

// ---- backward -----------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void backward_block(const BackwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const ForwardArgs<Acc>& x = a.x;
  const Dims& z = x.z;
  const Tile tl = tile_of(z, x.cu_seqlens, block);
  const int64_t D = z.D, N = z.N, ch = z.ch, I = items(z), C = z.C, s = tl.s, bos = tl.bos;
  const int64_t tile = block % z.tiles, rows = token_rows(z, x.cu_seqlens);
  Acc *g = a.work + block * backward_work(z), *hs = g + I, *r_dt = hs + (C + 1) * I, *r_x = r_dt + C * I,
      *r_B = r_x + C * I;
  MNEMO_FOR_LANES(item, I, lanes) {
    const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
    if (j >= tl.width) continue;
    const int64_t o = (s * D + tl.d0 + j) * N + n;
    g[item] = a.dhT ? a.dhT[o] : Acc(0);
    a.dA_seqs[o] = 0;
  }
  grid::barrier();
  for (int c = tl.chunks - 1; c >= 0; --c) {
    const int64_t t0 = static_cast<int64_t>(c) * C, len = tl.len - t0 < C ? tl.len - t0 : C;
    MNEMO_FOR_LANES(item, I, lanes) {
      const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
      if (j >= tl.width) continue;
      const int64_t d = tl.d0 + j;
      const Acc An = x.A[d * N + n];
      // The chunk's states from its checkpoint: hs row 0 the start, row τ + 1 after step τ.
      Acc h = hs[item] = x.ckpt[((tl.slot0 + c) * D + d) * N + n];
      for (int64_t tau = 0; tau < len; ++tau) {
        const int64_t row = bos + t0 + tau, i = row * D + d;
        const Acc step = x.dt[i];
        h = grid::exp_acc(step * An) * h + step * x.x[i] * x.Bm[row * N + n];
        hs[(tau + 1) * I + item] = h;
      }
      Acc gn = g[item], dA = 0;
      for (int64_t tau = len - 1; tau >= 0; --tau) {
        const int64_t row = bos + t0 + tau, i = row * D + d, r = row * N + n;
        const Acc step = x.dt[i], xv = x.x[i], Bn = x.Bm[r], gy = a.dy[i];
        const Acc an = grid::exp_acc(step * An);
        const Acc G = gn + gy * x.Cm[r];               // total adjoint of h_t
        const Acc da = G * hs[tau * I + item] * an;    // ∂L/∂(Δ_t A[d, n])
        r_dt[tau * I + item] = da * An + G * xv * Bn;  // this entry's part of Δ̄_t[d]
        r_x[tau * I + item] = G * step * Bn;           // of x̄_t[d]
        r_B[tau * I + item] = G * step * xv;           // of B̄_t[n]
        hs[(tau + 1) * I + item] *= gy;                // of C̄_t[n] (h_t is not read again)
        dA += da * step;
        gn = G * an;
      }
      g[item] = gn;
      a.dA_seqs[(s * D + d) * N + n] += dA;
    }
    grid::barrier();
    MNEMO_FOR_LANES(e, len * tl.width, lanes) {  // Δ̄, x̄: sums over the entries n
      const int64_t tau = e / tl.width, j = e % tl.width, i = (bos + t0 + tau) * D + tl.d0 + j;
      Acc s_dt = 0, s_x = 0;
      for (int64_t n = 0; n < N; ++n) s_dt += r_dt[tau * I + n * ch + j], s_x += r_x[tau * I + n * ch + j];
      a.ddt[i] = s_dt, a.dx[i] = s_x;
    }
    MNEMO_FOR_LANES(e, len * N, lanes) {  // B̄, C̄: sums over the tile's channels
      const int64_t tau = e / N, n = e % N, o = (tile * rows + bos + t0 + tau) * N + n;
      Acc s_B = 0, s_C = 0;
      for (int64_t j = 0; j < tl.width; ++j) s_B += r_B[tau * I + n * ch + j], s_C += hs[(tau + 1) * I + n * ch + j];
      a.dB_tiles[o] = s_B, a.dC_tiles[o] = s_C;
    }
    grid::barrier();
  }
  if (a.dh0)
    MNEMO_FOR_LANES(item, I, lanes) {
      const int j = static_cast<int>(item % ch), n = static_cast<int>(item / ch);
      if (j < tl.width) a.dh0[(s * D + tl.d0 + j) * N + n] = g[item];
    }
}

}  // namespace mnemo::mamba_kernel
