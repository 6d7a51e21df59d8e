// CUDA kernel of the inter-chunk state pass of the chunked recurrences whose state decays per row (docs/gpu.md,
// "The chunk state pass"), forward and backward, as block code (runtime/kernels/block_grid.cuh): the same functions
// run as CUDA kernels (state_pass_kernel.cu) and, over a sequential grid, on the host (state_pass_node.cpp), where the
// CPU tests check them against the eager chunk loop in fp64 and fp32 (tests/test_cuda_kernels_state_pass.cpp).
//
// Every chunked form computes what does not depend on the state for all chunks at once; what is left is a
// sequential pass over the N chunks of each (batch row, head). With S_n [R, V] the state at the start of chunk n:
//   X_n = U_n − W_n S_n                               (delta form only; W_n [C, R], U_n [C, V])
//   S_{n+1} = Diag(d_n) S_n + B_nᵀ X_n + E_n          (d_n [R] the chunk's decay per state row, B_n [C, R],
//                                                      E_n [R, V] the chunk's own increment; each term optional)
// The plain form (no W, U, B) is the scan of GLA, RetNet, GSA's slot pass and MesaNet's statistics; the delta form is
// the WY pass of Kimi Delta Attention (X = U', B = K ⊙ e^{b_C − b}) and of RWKV-7 (W = −W, X = the state reads U).
// The forward writes every S_n (`starts`), every X_n and S_N.
//
// Backward, with Ŝ_n the adjoint of S_n (what the caller's use of `starts` sends back, plus the pass itself), Ā_n the
// adjoint of S_{n+1} and X̄_n that of X_n from the caller; chunks in reverse from Ā_{N−1} = the adjoint of S_N:
//   Y_n = X̄_n + B_n Ā_n                               (the total adjoint of X_n; = Ū_n)
//   Ā_{n−1} = Diag(d_n) Ā_n − W_nᵀ Y_n + Ŝ_n          (Ā_{−1}: the adjoint of the initial state)
// The kernel writes every Ā_n and Y_n; the rest are batched products the caller forms for all chunks at once:
//   d̄_n = rowsum(S_n ⊙ Ā_n),  Ē_n = Ā_n,  W̄_n = −Y_n S_nᵀ,  B̄_n = X_n Ā_nᵀ.
//
// Every state column is independent of every other, so a block is one (sequence, tile of V columns) and runs its
// tile's columns through all chunks; inside a chunk X (a [C, tile] product) and then the next state (an [R, tile]
// product) are each one phase (tile_product: a micro-tile of outputs a lane). The states live in the
// output `starts` itself (S_{n+1} is written beside S_n), so the pass needs no workspace. Every tensor is contiguous
// in Acc (fp32 or fp64).
#pragma once

#include <cstdint>

#include "runtime/kernels/block_grid.cuh"

namespace mnemo::state_pass_kernel {

using grid::Lanes;

constexpr int kThreads = 256;
constexpr int kTileColumns = 64;  // state columns a block

struct Dims {
  int64_t blocks;  // seqs · tiles
  int64_t seqs;    // independent recurrences (batch rows × heads)
  int N;           // chunks
  int C;           // rows of a chunk (delta form; 0 otherwise)
  int R, V;        // state rows and columns
  int tile, tiles;
};

inline Dims make_dims(int64_t seqs, int N, int C, int R, int V) {
  Dims z{};
  z.seqs = seqs, z.N = N, z.C = C, z.R = R, z.V = V;
  z.tile = V < kTileColumns ? (V < 1 ? 1 : V) : kTileColumns;
  z.tiles = (V + z.tile - 1) / z.tile;
  z.blocks = seqs * z.tiles;
  return z;
}

template <class Acc>
struct ForwardArgs {
  Dims z;
  const Acc* decay;              // [seqs, N, R]
  const Acc *W, *U, *B;          // [seqs, N, C, R], [seqs, N, C, V], [seqs, N, C, R]; W null: the plain form
  const Acc* increments;         // [seqs, N, R, V], null: none
  const Acc* s0;                 // [seqs, R, V], null: zeros
  Acc* starts;                   // [seqs, N, R, V]: S_n
  Acc* X;                        // [seqs, N, C, V] (delta form)
  Acc* final_state;              // [seqs, R, V]: S_N
};

template <class Acc>
struct BackwardArgs {
  ForwardArgs<Acc> x;                  // decay, W, B read
  const Acc *d_starts, *d_X, *d_final;  // the caller's adjoints of S_n, X_n, S_N; null: zeros
  Acc* d_after;                        // [seqs, N, R, V]: Ā_n, the adjoint of S_{n+1}
  Acc* d_U;                            // [seqs, N, C, V]: Y_n (delta form)
  Acc* d_s0;                           // [seqs, R, V]
};

// The block's place: its recurrence s, first column v0 and width w.
struct Place {
  int64_t s;
  int v0, w;
};
MNEMO_HD Place place_of(const Dims& z, int64_t block) {
  Place pl{};
  pl.s = block / z.tiles;
  pl.v0 = static_cast<int>(block % z.tiles) * z.tile;
  pl.w = z.V - pl.v0 < z.tile ? z.V - pl.v0 : z.tile;
  return pl;
}

// A product phase: out(i, j) = init(i, j) + Σ_{r<K} a(i, r) b(r, j) for rows i < M and the tile's columns j < w.
// Each lane owns a micro-tile of kRows × kCols outputs, so one load of a(·, r) and of b(r, ·) feeds kRows · kCols
// products (kRows + kCols loads for 16 products instead of 2 loads for 1); neighbouring lanes own neighbouring
// column groups. Every output sums its products in the order r = 0, 1, ..
constexpr int kRows = 4, kCols = 4;
template <class Acc, class A, class B, class Init, class Store>
MNEMO_HD void tile_product(int64_t M, int64_t K, int w, Lanes lanes, const A& a, const B& b, const Init& init,
                           const Store& store) {
  const int64_t col_groups = (w + kCols - 1) / kCols, groups = (M + kRows - 1) / kRows * col_groups;
  MNEMO_FOR_LANES(item, groups, lanes) {
    const int64_t i0 = item / col_groups * kRows;
    const int j0 = static_cast<int>(item % col_groups) * kCols;
    const int rows = M - i0 < kRows ? static_cast<int>(M - i0) : kRows, cols = w - j0 < kCols ? w - j0 : kCols;
    Acc acc[kRows][kCols];
    MNEMO_UNROLL
    for (int m = 0; m < kRows; ++m)
      MNEMO_UNROLL
      for (int n = 0; n < kCols; ++n) acc[m][n] = m < rows && n < cols ? init(i0 + m, j0 + n) : Acc(0);
    for (int64_t r = 0; r < K; ++r) {
      Acc av[kRows], bv[kCols];
      MNEMO_UNROLL
      for (int m = 0; m < kRows; ++m) av[m] = m < rows ? a(i0 + m, r) : Acc(0);
      MNEMO_UNROLL
      for (int n = 0; n < kCols; ++n) bv[n] = n < cols ? b(r, j0 + n) : Acc(0);
      MNEMO_UNROLL
      for (int m = 0; m < kRows; ++m)
        MNEMO_UNROLL
        for (int n = 0; n < kCols; ++n) acc[m][n] += av[m] * bv[n];
    }
    MNEMO_UNROLL
    for (int m = 0; m < kRows; ++m)
      MNEMO_UNROLL
      for (int n = 0; n < kCols; ++n)
        if (m < rows && n < cols) store(i0 + m, j0 + n, acc[m][n]);  // constant indices: acc stays in registers
  }
}

// ---- forward ------------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void forward_block(const ForwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const Dims& z = a.z;
  const Place pl = place_of(z, block);
  const int64_t R = z.R, V = z.V, C = z.C, RV = R * V, CV = C * V, CR = C * R;
  // S_n for n < N in `starts`, S_N in `final_state`.
  auto state = [&](int n) -> Acc* { return n < z.N ? a.starts + (pl.s * z.N + n) * RV : a.final_state + pl.s * RV; };
  {
    Acc* S0 = state(0);
    MNEMO_FOR_LANES(e, R * pl.w, lanes) {
      const int64_t r = e / pl.w, col = pl.v0 + e % pl.w;
      S0[r * V + col] = a.s0 ? a.s0[pl.s * RV + r * V + col] : Acc(0);
    }
  }
  grid::barrier();
  for (int n = 0; n < z.N; ++n) {
    const int64_t cn = pl.s * z.N + n;
    const Acc* S = state(n);
    Acc* next = state(n + 1);
    const Acc *Wn = a.W ? a.W + cn * CR : nullptr, *Bn = a.W ? a.B + cn * CR : nullptr;
    Acc* Xn = a.W ? a.X + cn * CV : nullptr;
    const int64_t v0 = pl.v0;
    if (a.W) {
      const Acc* Un = a.U + cn * CV;
      tile_product<Acc>(  // X_n = U_n − W_n S_n
          C, R, pl.w, lanes, [&](int64_t i, int64_t r) { return -Wn[i * R + r]; },
          [&](int64_t r, int64_t j) { return S[r * V + v0 + j]; },
          [&](int64_t i, int64_t j) { return Un[i * V + v0 + j]; },
          [&](int64_t i, int64_t j, Acc x) { Xn[i * V + v0 + j] = x; });
      grid::barrier();
    }
    const Acc* dn = a.decay + cn * R;
    const Acc* En = a.increments ? a.increments + cn * RV : nullptr;
    tile_product<Acc>(  // S_{n+1} = Diag(d_n) S_n + E_n + B_nᵀ X_n
        R, a.W ? C : 0, pl.w, lanes, [&](int64_t r, int64_t i) { return Bn[i * R + r]; },
        [&](int64_t i, int64_t j) { return Xn[i * V + v0 + j]; },
        [&](int64_t r, int64_t j) { return dn[r] * S[r * V + v0 + j] + (En ? En[r * V + v0 + j] : Acc(0)); },
        [&](int64_t r, int64_t j, Acc x) { next[r * V + v0 + j] = x; });
    grid::barrier();
  }
}

// ---- backward -----------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void backward_block(const BackwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const ForwardArgs<Acc>& x = a.x;
  const Dims& z = x.z;
  const Place pl = place_of(z, block);
  const int64_t R = z.R, V = z.V, C = z.C, RV = R * V, CV = C * V, CR = C * R;
  // Ā_n for n >= 0 in `d_after`, Ā_{−1} (the initial state's adjoint) in `d_s0`.
  auto after = [&](int n) -> Acc* { return n >= 0 ? a.d_after + (pl.s * z.N + n) * RV : a.d_s0 + pl.s * RV; };
  {
    Acc* last = after(z.N - 1);
    MNEMO_FOR_LANES(e, R * pl.w, lanes) {
      const int64_t r = e / pl.w, col = pl.v0 + e % pl.w;
      last[r * V + col] = a.d_final ? a.d_final[pl.s * RV + r * V + col] : Acc(0);
    }
  }
  grid::barrier();
  for (int n = z.N - 1; n >= 0; --n) {
    const int64_t cn = pl.s * z.N + n;
    const Acc* dS = after(n);
    Acc* prev = after(n - 1);
    const Acc *Wn = x.W ? x.W + cn * CR : nullptr, *Bn = x.W ? x.B + cn * CR : nullptr;
    Acc* Yn = x.W ? a.d_U + cn * CV : nullptr;
    const int64_t v0 = pl.v0;
    if (x.W) {
      const Acc* dXn = a.d_X ? a.d_X + cn * CV : nullptr;
      tile_product<Acc>(  // Y_n = X̄_n + B_n Ā_n
          C, R, pl.w, lanes, [&](int64_t i, int64_t r) { return Bn[i * R + r]; },
          [&](int64_t r, int64_t j) { return dS[r * V + v0 + j]; },
          [&](int64_t i, int64_t j) { return dXn ? dXn[i * V + v0 + j] : Acc(0); },
          [&](int64_t i, int64_t j, Acc y) { Yn[i * V + v0 + j] = y; });
      grid::barrier();
    }
    const Acc* dn = x.decay + cn * R;
    const Acc* dSn = a.d_starts ? a.d_starts + cn * RV : nullptr;
    tile_product<Acc>(  // Ā_{n−1} = Diag(d_n) Ā_n + Ŝ_n − W_nᵀ Y_n
        R, x.W ? C : 0, pl.w, lanes, [&](int64_t r, int64_t i) { return -Wn[i * R + r]; },
        [&](int64_t i, int64_t j) { return Yn[i * V + v0 + j]; },
        [&](int64_t r, int64_t j) { return dn[r] * dS[r * V + v0 + j] + (dSn ? dSn[r * V + v0 + j] : Acc(0)); },
        [&](int64_t r, int64_t j, Acc y) { prev[r * V + v0 + j] = y; });
    grid::barrier();
  }
}

}  // namespace mnemo::state_pass_kernel
