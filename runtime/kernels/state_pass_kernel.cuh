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
// tile's columns through all chunks; inside a chunk the rows of X (items (i, column)) and then the rows of the next
// state (items (r, column)) are each one phase, neighbouring lanes on neighbouring columns. The states live in the
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
    if (a.W) {
      const Acc *Wn = a.W + cn * CR, *Un = a.U + cn * CV;
      Acc* Xn = a.X + cn * CV;
      MNEMO_FOR_LANES(e, C * pl.w, lanes) {  // X_n = U_n − W_n S_n
        const int64_t i = e / pl.w, col = pl.v0 + e % pl.w;
        Acc acc = Un[i * V + col];
        for (int64_t r = 0; r < R; ++r) acc -= Wn[i * R + r] * S[r * V + col];
        Xn[i * V + col] = acc;
      }
      grid::barrier();
    }
    const Acc* dn = a.decay + cn * R;
    MNEMO_FOR_LANES(e, R * pl.w, lanes) {  // S_{n+1} = Diag(d_n) S_n + B_nᵀ X_n + E_n
      const int64_t r = e / pl.w, col = pl.v0 + e % pl.w;
      Acc acc = dn[r] * S[r * V + col];
      if (a.W) {
        const Acc *Bn = a.B + cn * CR, *Xn = a.X + cn * CV;
        for (int64_t i = 0; i < C; ++i) acc += Bn[i * R + r] * Xn[i * V + col];
      }
      if (a.increments) acc += a.increments[cn * RV + r * V + col];
      next[r * V + col] = acc;
    }
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
    if (x.W) {
      const Acc* Bn = x.B + cn * CR;
      Acc* Yn = a.d_U + cn * CV;
      MNEMO_FOR_LANES(e, C * pl.w, lanes) {  // Y_n = X̄_n + B_n Ā_n
        const int64_t i = e / pl.w, col = pl.v0 + e % pl.w;
        Acc acc = a.d_X ? a.d_X[cn * CV + i * V + col] : Acc(0);
        for (int64_t r = 0; r < R; ++r) acc += Bn[i * R + r] * dS[r * V + col];
        Yn[i * V + col] = acc;
      }
      grid::barrier();
    }
    const Acc* dn = x.decay + cn * R;
    MNEMO_FOR_LANES(e, R * pl.w, lanes) {  // Ā_{n−1} = Diag(d_n) Ā_n − W_nᵀ Y_n + Ŝ_n
      const int64_t r = e / pl.w, col = pl.v0 + e % pl.w;
      Acc acc = dn[r] * dS[r * V + col];
      if (x.W) {
        const Acc *Wn = x.W + cn * CR, *Yn = a.d_U + cn * CV;
        for (int64_t i = 0; i < C; ++i) acc -= Wn[i * R + r] * Yn[i * V + col];
      }
      if (a.d_starts) acc += a.d_starts[cn * RV + r * V + col];
      prev[r * V + col] = acc;
    }
    grid::barrier();
  }
}

}  // namespace mnemo::state_pass_kernel
