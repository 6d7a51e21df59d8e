// Chunk kernels of the delta rule and the gated delta rule (DeltaNet, arXiv:2406.06484; Gated DeltaNet,
// arXiv:2412.06464), forward and backward, as block code (runtime/kernels/block_grid.cuh): the same functions run
// as CUDA kernels (chunk_kernel.cu) and, over a sequential grid, on the host (chunk_fused.cpp), where the CPU tests
// check them against delta_rule_chunk and delta_rule_recurrent in fp64 and fp32 (tests/test_cuda_kernels_delta_rule.cpp).
//
// Sequences are packed along T (fla's varlen convention): sequence s is rows [cu_seqlens[s], cu_seqlens[s+1]) of
// q, k [T, H, K], v [T, H, V], beta, g [T, H]; its chunks are chunk_offsets[s] .. chunk_offsets[s+1]-1 of every
// per-chunk buffer. A batch of B equal-length sequences is the packing of its B rows (cu_seqlens = 0, T, 2T, ...).
// Each sequence starts from its own initial state h0[s] (zero when absent) and leaves its final state in ht[s].
//
// Per chunk of c rows (the last chunk of a sequence may be shorter; no padding), Q = scale·q, S the state before
// the chunk, b_i = Σ_{r<=i} g_r (inclusive in-chunk cumulative log decay; 0 without g = DeltaNet):
//   Γ_ij = e^{b_i - b_j} (j <= i)
//   A = stril(diag(β) K Kᵀ ⊙ Γ),  L = I + A,  P = tril(Q Kᵀ ⊙ Γ)
//   U' = L⁻¹ diag(β) (V - diag(e^b) K S)           (= U − W S of the WY form; fla's v_new)
//   O = diag(e^b) Q S + P U'
//   S ← e^{b_c} S + (K ⊙ e^{b_c - b})ᵀ U'
// Only the state recurrence is sequential over chunks; everything that does not depend on S is computed for all
// chunks at once. The forward runs three stages, the backward three, each one launch:
//   prepare    grid (chunk, head):          L⁻¹ per chunk (forward substitution on the identity, one column per lane)
//   state      grid (sequence, head, V tile): the chunk loop: h[chunk] = S, U' = L⁻¹ R with R = diag(β)(V - e^b K S),
//                                          S ← e^{b_c} S + Kdᵀ U'; U' stored (as fla stores v_new)
//   output     grid (chunk, head, V tile):  O = diag(e^b) Q S + P U'
// Backward (dS_T given or 0; dS_c is the adjoint of the state after chunk c):
//   local      grid (chunk, head, V tile):  D = Pᵀ dO                                  (intra-chunk part of dU')
//   state      grid (sequence, head, V tile), chunks in reverse: dh[chunk] = dS; dU' = D + Kd dS with
//              Kd_j = k_j e^{b_c - b_j}; dR = L⁻ᵀ dU' (stored); dS ← e^{b_c} dS + (diag(e^b) Q)ᵀ dO − (diag(β e^b) K)ᵀ dR
//   gradients  grid (chunk, head, V tile), with S = h[chunk], dS = dh[chunk], U', dR:
//   dP  = dO U'ᵀ (j <= i),  dA = -dR U'ᵀ (j < i)
//   Y = dO Sᵀ,  Z = dR Sᵀ,  Wk = U' dSᵀ                       ([c, K] each)
//   dQ_i = e^{b_i} Y_i + Σ_{j<=i} dP_ij Γ_ij k_j
//   dk_i = -β_i e^{b_i} Z_i + Σ_{i'>=i} dP_i'i Γ_i'i Q_i' + Σ_{j<i} dA_ij β_i Γ_ij k_j + Σ_{i'>i} dA_i'i β_i' Γ_i'i k_i'
//          + e^{b_c - b_i} Wk_i
//   dv_i = β_i dR_i
//   dβ_i = dR_i·v_i - e^{b_i} k_i·Z_i + Σ_{j<i} dA_ij Γ_ij (k_i·k_j)
//   db_i = e^{b_i} Q_i·Y_i - β_i e^{b_i} k_i·Z_i + Σ_j M_ij - Σ_i' M_i'i - t_i + [i = c] (Σ_j t_j + e^{b_c} <S, dS>)
//          with M = dP ⊙ P + dA ⊙ A and t_j = e^{b_c - b_j} k_j·Wk_j
//   dg_r = Σ_{i>=r} db_i,   dq = scale·dQ,   dS0 = the state stage's last dS
// Every column of V is independent in the forward, so a V tile needs only its columns of v, S, U' and o. In the
// backward each gradient is a sum over V columns of per-column terms: a V tile writes its share of dq, dk, dβ, dg
// (the caller sums the tiles) and its columns of dv and dS0 exactly.
//
// Precision: gates (b, Γ), L⁻¹, the states and every intermediate are in Acc (fp32 for fp32/bf16 inputs, fp64 for
// fp64); inputs are read and o written in the element type T (float, double, grid::bf16). Gradients are written in
// Acc. Each stage is a sequence of MNEMO_FOR_LANES phases over independent work items separated by
// grid::barrier(); row sums that many items feed go through grid::atomic_add on shared accumulators.
// Shared memory holds only C×C and C×bv tiles (q, k, S and dS are read from global memory), so a block's tiles do
// not grow with K; a layout past the device's dynamic shared memory (a V tile asked for that is too wide) runs from
// a global workspace.
// bf16 inputs run each stage on tensor cores instead (chunk_kernel_mma.cuh: the same equations, products through
// block_mma on bf16 tiles in shared memory).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <type_traits>

#include "runtime/kernels/block_grid.cuh"
#include "runtime/kernels/block_mma.cuh"
#include "runtime/kernels/bf16.cuh"

namespace mnemo::delta_rule_kernel {

using grid::Lanes;
using grid::SharedArena;

using grid::bf16;
using grid::exp_acc;

template <class Acc, class T>
MNEMO_HD Acc load(const T& x) { return grid::load_as<Acc>(&x); }

// Sizes and the varlen packing shared by every stage.
struct Problem {
  int num_seqs;     // sequences packed along T
  int num_chunks;   // chunk_offsets[num_seqs]
  int heads;        // H
  int key_dim;      // K
  int value_dim;    // V
  int chunk;        // C, rows per chunk
  int bv;           // V columns per block
  double scale;     // q scale
  const int32_t* cu_seqlens;     // [num_seqs + 1] row offsets
  const int32_t* chunk_offsets;  // [num_seqs + 1] chunk offsets into the per-chunk buffers

  MNEMO_HD int value_tiles() const { return (value_dim + bv - 1) / bv; }
  // Blocks of the grids: (sequence, head, V tile) for the state stages, (chunk, head) for prepare,
  // (chunk, head, V tile) for the others.
  MNEMO_HD int64_t sequence_blocks() const { return static_cast<int64_t>(num_seqs) * heads * value_tiles(); }
  MNEMO_HD int64_t chunk_blocks() const { return static_cast<int64_t>(num_chunks) * heads; }
  MNEMO_HD int64_t chunk_tile_blocks() const { return chunk_blocks() * value_tiles(); }
};

template <class T, class Acc>
struct ForwardArgs {
  Problem p;
  const T* q;        // [T, H, K]
  const T* k;        // [T, H, K]
  const T* v;        // [T, H, V]
  const Acc* beta;   // [T, H]
  const Acc* g;      // [T, H] log decay, nullptr = DeltaNet
  const Acc* h0;     // [num_seqs, H, K, V], nullptr = zero
  T* o;              // [T, H, V]
  Acc* h;            // [chunks, H, K, V] chunk-start states
  Acc* ht;           // [num_seqs, H, K, V] final states
  Acc* linv;         // [chunks, H, C, C] L⁻¹ per chunk
  Acc* u;            // [T, H, V] U' (kept for the backward)
};

template <class T, class Acc>
struct BackwardArgs {
  Problem p;
  const T* q;
  const T* k;
  const T* v;
  const T* dout;     // [T, H, V]
  const Acc* beta;
  const Acc* g;      // nullptr = DeltaNet (dg not written)
  const Acc* h;      // chunk-start states from the forward
  const Acc* linv;   // L⁻¹ per chunk from the forward
  const Acc* u;      // U' from the forward
  const Acc* dht;    // [num_seqs, H, K, V], nullptr = zero
  Acc* dh;           // [chunks, H, K, V] scratch: the adjoint of the state after each chunk
  Acc* dr;           // [T, H, V] scratch: Pᵀ dO, then dR
  Acc* dq;           // [value_tiles, T, H, K] per-tile shares
  Acc* dk;           // [value_tiles, T, H, K]
  Acc* dv;           // [T, H, V]
  Acc* dbeta;        // [value_tiles, T, H]
  Acc* dg;           // [value_tiles, T, H] (when g)
  Acc* dh0;          // [num_seqs, H, K, V]; also carries dS through the chunk loop
};

// A (sequence, head, V tile) block's place: its rows and chunks.
struct Place {
  int seq, head, vt, v0, bvn;
  int64_t row0, rows, chunk0;
  MNEMO_HD Place(const Problem& p, int64_t block) {
    const int nv = p.value_tiles();
    vt = static_cast<int>(block % nv);
    head = static_cast<int>((block / nv) % p.heads);
    seq = static_cast<int>(block / (static_cast<int64_t>(nv) * p.heads));
    v0 = vt * p.bv;
    bvn = p.value_dim - v0 < p.bv ? p.value_dim - v0 : p.bv;
    row0 = p.cu_seqlens[seq];
    rows = p.cu_seqlens[seq + 1] - row0;
    chunk0 = p.chunk_offsets[seq];
  }
};

// A (chunk, head[, V tile]) block's place: the chunk's sequence (binary search in chunk_offsets; an empty
// sequence owns no chunk), first row r0 and row count c.
struct ChunkPlace {
  int seq, head, vt, v0, bvn, c;
  int64_t chunk, r0;
  MNEMO_HD ChunkPlace(const Problem& p, int64_t block, bool tiled) {
    const int nv = tiled ? p.value_tiles() : 1;
    vt = static_cast<int>(block % nv);
    head = static_cast<int>((block / nv) % p.heads);
    chunk = block / (static_cast<int64_t>(nv) * p.heads);
    int lo = 0, hi = p.num_seqs;  // chunk_offsets[lo] <= chunk < chunk_offsets[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (p.chunk_offsets[mid] <= chunk) lo = mid; else hi = mid;
    }
    seq = lo;
    r0 = p.cu_seqlens[seq] + (chunk - p.chunk_offsets[seq]) * p.chunk;
    const int64_t left = p.cu_seqlens[seq + 1] - r0;
    c = static_cast<int>(left < p.chunk ? left : p.chunk);
    v0 = vt * p.bv;
    bvn = tiled ? (p.value_dim - v0 < p.bv ? p.value_dim - v0 : p.bv) : 0;
  }
};

// Per-row gates of a chunk in shared memory: β, the raw log decay and b (its inclusive prefix sum).
template <class Acc>
struct Gates {
  Acc *beta, *graw, *b;
  MNEMO_HD Gates(SharedArena& s, const Problem& p)
      : beta(s.take<Acc>(p.chunk)), graw(s.take<Acc>(p.chunk)), b(s.take<Acc>(p.chunk)) {}
};

// Loads β and g of rows [r0, r0 + c) (phase 1; the caller's own loads may share it), then b (phase 2).
template <class Acc>
MNEMO_HD void load_gates_raw(const Problem& p, int head, const Acc* beta, const Acc* g, int64_t r0, int c,
                             Gates<Acc>& s, Lanes lanes) {
  MNEMO_FOR_LANES(i, c, lanes) {
    s.beta[i] = beta ? beta[(r0 + i) * p.heads + head] : Acc(0);
    s.graw[i] = g ? g[(r0 + i) * p.heads + head] : Acc(0);
  }
}
template <class Acc>
MNEMO_HD void prefix_gates(int c, Gates<Acc>& s, Lanes lanes) {
  MNEMO_FOR_LANES(i, c, lanes) {  // each row sums its prefix in the same order
    Acc acc = 0;
    for (int r = 0; r <= i; ++r) acc += s.graw[r];
    s.b[i] = acc;
  }
}

// Row i, entry d of a [T, H, D] buffer.
MNEMO_HD int64_t row_at(const Problem& p, int64_t row, int head, int dim, int d) {
  return (row * p.heads + head) * static_cast<int64_t>(dim) + d;
}

// State slice (columns v0.. of head `head`) of entry `index` in a [*, H, K, V] buffer.
template <class Acc>
MNEMO_HD Acc* state_at(Acc* base, const Problem& p, int64_t index, int head, int v0) {
  return base + (index * p.heads + head) * static_cast<int64_t>(p.key_dim) * p.value_dim + v0;
}
template <class Acc>
MNEMO_HD const Acc* state_at(const Acc* base, const Problem& p, int64_t index, int head, int v0) {
  return base + (index * p.heads + head) * static_cast<int64_t>(p.key_dim) * p.value_dim + v0;
}

// L⁻¹ of chunk `chunk`, head `head` in a [chunks, H, C, C] buffer.
template <class Acc>
MNEMO_HD Acc* linv_at(Acc* base, const Problem& p, int64_t chunk, int head) {
  return base + (chunk * p.heads + head) * static_cast<int64_t>(p.chunk) * p.chunk;
}
template <class Acc>
MNEMO_HD const Acc* linv_at(const Acc* base, const Problem& p, int64_t chunk, int head) {
  return base + (chunk * p.heads + head) * static_cast<int64_t>(p.chunk) * p.chunk;
}

// q_i·k_j (scaled q) and k_i·k_j of rows r0 + i, r0 + j, read from global memory.
template <class T, class Acc>
MNEMO_HD Acc dot_rows(const Problem& p, const T* x, const T* y, int64_t ri, int64_t rj, int head) {
  const int K = p.key_dim;
  Acc acc = 0;
  for (int d = 0; d < K; ++d) acc += load<Acc>(x[row_at(p, ri, head, K, d)]) * load<Acc>(y[row_at(p, rj, head, K, d)]);
  return acc;
}

// X = L⁻¹ = (I + A)⁻¹ of a chunk's c rows (A strictly lower, leading dimension ld; X the same layout) by forward
// substitution, one column per item: x_i = [i = col] − Σ_{col<=j<i} A_ij x_j (zero above the diagonal). Then
// (after a barrier) X into the [C, C] block of L⁻¹ in global memory.
template <class Acc>
MNEMO_HD void invert_unit_lower(const Acc* a, int ld, int c, Acc* x, Lanes lanes) {
  MNEMO_FOR_LANES(col, c, lanes) {
    for (int i = 0; i < c; ++i) {
      Acc acc = i == col ? Acc(1) : Acc(0);
      if (i > col)
        for (int j = col; j < i; ++j) acc -= a[i * ld + j] * x[j * ld + col];
      x[i * ld + col] = acc;
    }
  }
}
template <class Acc>
MNEMO_HD void store_linv(const Acc* x, int ld, int c, int C, Acc* out, Lanes lanes) {
  MNEMO_FOR_LANES(e, c * c, lanes) { out[(e / c) * C + e % c] = x[(e / c) * ld + e % c]; }
}

// bf16 inputs run every stage on tensor cores (chunk_kernel_mma.cuh); fp32 and fp64 inputs the scalar stages
// below, whose sums are all in Acc.
template <class T>
constexpr bool kTensorCores = std::is_same<T, bf16>::value;

}  // namespace mnemo::delta_rule_kernel

#include "runtime/delta_rule/chunk_kernel_mma.cuh"

namespace mnemo::delta_rule_kernel {

// ---- Forward --------------------------------------------------------------------------------------------------

// prepare: L⁻¹ = (I + A)⁻¹ of one (chunk, head). Tiles: gates; A and X = L⁻¹ [C, C].
template <class Acc>
struct PrepareTiles {
  Gates<Acc> gates;
  Acc *a, *x;
  MNEMO_HD PrepareTiles(SharedArena& s, const Problem& p)
      : gates(s, p), a(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.chunk)),
        x(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.chunk)) {}
};

template <class T, class Acc>
MNEMO_HD void prepare_block(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    prepare_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const ChunkPlace at(p, block, false);
  SharedArena arena(shared);
  PrepareTiles<Acc> s(arena, p);
  const int C = p.chunk, c = at.c;
  load_gates_raw<Acc>(p, at.head, a.beta, a.g, at.r0, c, s.gates, lanes);
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  grid::barrier();
  // Phase: A_ij = β_i Γ_ij k_i·k_j (j < i).
  MNEMO_FOR_LANES(e, c * c, lanes) {
    const int i = e / c, j = e % c;
    s.a[i * C + j] = j < i ? s.gates.beta[i] * exp_acc(s.gates.b[i] - s.gates.b[j]) *
                                 dot_rows<T, Acc>(p, a.k, a.k, at.r0 + i, at.r0 + j, at.head)
                           : Acc(0);
  }
  grid::barrier();
  invert_unit_lower<Acc>(s.a, C, c, s.x, lanes);
  grid::barrier();
  store_linv<Acc>(s.x, C, c, C, linv_at(a.linv, p, at.chunk, at.head), lanes);
}

// state (forward): the chunk loop of one (sequence, head, V tile). Tiles: gates; L⁻¹ [C, C]; R, U' [C, bv].
template <class Acc>
struct StateTiles {
  Gates<Acc> gates;
  Acc *l, *r, *u;
  MNEMO_HD StateTiles(SharedArena& s, const Problem& p)
      : gates(s, p), l(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.chunk)),
        r(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.bv)),
        u(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.bv)) {}
};

template <class T, class Acc>
MNEMO_HD void state_forward_block(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    state_forward_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  StateTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, BV = p.bv, bvn = at.bvn;
  const int64_t chunks = (at.rows + C - 1) / C;
  Acc* ht = state_at(a.ht, p, at.seq, at.head, at.v0);
  // Phase: the starting state into h[first chunk] (or straight into ht for an empty sequence).
  {
    Acc* first = chunks > 0 ? state_at(a.h, p, at.chunk0, at.head, at.v0) : ht;
    const Acc* init = a.h0 ? state_at(a.h0, p, at.seq, at.head, at.v0) : nullptr;
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      first[static_cast<int64_t>(d) * V + col] = init ? init[static_cast<int64_t>(d) * V + col] : Acc(0);
    }
  }
  grid::barrier();
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t r0 = at.row0 + n * C;
    const int c = static_cast<int>(at.rows - n * C < C ? at.rows - n * C : C);
    const Acc* S = state_at(a.h, p, at.chunk0 + n, at.head, at.v0);
    Acc* next = n + 1 < chunks ? state_at(a.h, p, at.chunk0 + n + 1, at.head, at.v0) : ht;
    const Acc* linv = linv_at(a.linv, p, at.chunk0 + n, at.head);
    // Phase: gates and L⁻¹ of the chunk.
    load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
    MNEMO_FOR_LANES(e, c * c, lanes) { s.l[(e / c) * C + e % c] = linv[(e / c) * C + e % c]; }
    grid::barrier();
    prefix_gates<Acc>(c, s.gates, lanes);
    grid::barrier();
    // Phase: R = diag(β) (V - diag(e^b) K S).
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int i = e / bvn, col = e % bvn;
      Acc ks = 0;
      for (int d = 0; d < K; ++d)
        ks += load<Acc>(a.k[row_at(p, r0 + i, at.head, K, d)]) * S[static_cast<int64_t>(d) * V + col];
      const Acc x = load<Acc>(a.v[row_at(p, r0 + i, at.head, V, at.v0 + col)]);
      s.r[i * BV + col] = s.gates.beta[i] * (x - exp_acc(s.gates.b[i]) * ks);
    }
    grid::barrier();
    // Phase: U' = L⁻¹ R, kept for the output stage and the backward.
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int i = e / bvn, col = e % bvn;
      Acc acc = 0;
      for (int j = 0; j <= i; ++j) acc += s.l[i * C + j] * s.r[j * BV + col];
      s.u[i * BV + col] = acc;
      a.u[row_at(p, r0 + i, at.head, V, at.v0 + col)] = acc;
    }
    grid::barrier();
    // Phase: S_next = e^{b_c} S + (K ⊙ e^{b_c - b})ᵀ U' (a different buffer than S).
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      const Acc bc = s.gates.b[c - 1];
      Acc w = 0;
      for (int j = 0; j < c; ++j)
        w += load<Acc>(a.k[row_at(p, r0 + j, at.head, K, d)]) * exp_acc(bc - s.gates.b[j]) * s.u[j * BV + col];
      next[static_cast<int64_t>(d) * V + col] = exp_acc(bc) * S[static_cast<int64_t>(d) * V + col] + w;
    }
    grid::barrier();
  }
}

// The causal score tile P_ij = Γ_ij Q_i·k_j (j <= i) of a chunk, from global q, k (after the gates' b).
template <class T, class Acc>
MNEMO_HD void score_tile(const Problem& p, const ChunkPlace& at, const T* q, const T* k, const Gates<Acc>& gates,
                         Acc* pm, Lanes lanes) {
  const int C = p.chunk, c = at.c;
  const Acc scale = static_cast<Acc>(p.scale);
  MNEMO_FOR_LANES(e, c * c, lanes) {
    const int i = e / c, j = e % c;
    pm[i * C + j] = j <= i ? scale * exp_acc(gates.b[i] - gates.b[j]) *
                                 dot_rows<T, Acc>(p, q, k, at.r0 + i, at.r0 + j, at.head)
                           : Acc(0);
  }
}

// output: O = diag(e^b) Q S + P U' of one (chunk, head, V tile). Tiles: gates; P [C, C]; U' [C, bv].
template <class Acc>
struct OutputTiles {
  Gates<Acc> gates;
  Acc *pm, *u;
  MNEMO_HD OutputTiles(SharedArena& s, const Problem& p)
      : gates(s, p), pm(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.chunk)),
        u(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.bv)) {}
};

template <class T, class Acc>
MNEMO_HD void output_block(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    output_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  OutputTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, BV = p.bv, bvn = at.bvn, c = at.c;
  const Acc scale = static_cast<Acc>(p.scale);
  const Acc* S = state_at(a.h, p, at.chunk, at.head, at.v0);
  load_gates_raw<Acc>(p, at.head, nullptr, a.g, at.r0, c, s.gates, lanes);
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    s.u[i * BV + col] = a.u[row_at(p, at.r0 + i, at.head, V, at.v0 + col)];
  }
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  grid::barrier();
  score_tile<T, Acc>(p, at, a.q, a.k, s.gates, s.pm, lanes);
  grid::barrier();
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    Acc qs = 0, pu = 0;
    for (int d = 0; d < K; ++d) qs += load<Acc>(a.q[row_at(p, at.r0 + i, at.head, K, d)]) * S[static_cast<int64_t>(d) * V + col];
    for (int j = 0; j <= i; ++j) pu += s.pm[i * C + j] * s.u[j * BV + col];
    grid::store_as<Acc>(&a.o[row_at(p, at.r0 + i, at.head, V, at.v0 + col)], exp_acc(s.gates.b[i]) * scale * qs + pu);
  }
}

// ---- Backward -------------------------------------------------------------------------------------------------

// local: D = Pᵀ dO of one (chunk, head, V tile) into dr. Tiles: gates; P [C, C]; dO [C, bv].
template <class Acc>
struct LocalTiles {
  Gates<Acc> gates;
  Acc *pm, *dout;
  MNEMO_HD LocalTiles(SharedArena& s, const Problem& p)
      : gates(s, p), pm(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.chunk)),
        dout(s.take<Acc>(static_cast<std::size_t>(p.chunk) * p.bv)) {}
};

template <class T, class Acc>
MNEMO_HD void local_backward_block(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    local_backward_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  LocalTiles<Acc> s(arena, p);
  const int V = p.value_dim, C = p.chunk, BV = p.bv, bvn = at.bvn, c = at.c;
  load_gates_raw<Acc>(p, at.head, nullptr, a.g, at.r0, c, s.gates, lanes);
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    s.dout[i * BV + col] = load<Acc>(a.dout[row_at(p, at.r0 + i, at.head, V, at.v0 + col)]);
  }
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  grid::barrier();
  score_tile<T, Acc>(p, at, a.q, a.k, s.gates, s.pm, lanes);
  grid::barrier();
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int j = e / bvn, col = e % bvn;
    Acc acc = 0;
    for (int i = j; i < c; ++i) acc += s.pm[i * C + j] * s.dout[i * BV + col];
    a.dr[row_at(p, at.r0 + j, at.head, V, at.v0 + col)] = acc;
  }
}

// state (backward): the reverse chunk loop of one (sequence, head, V tile). Tiles: gates; L⁻¹ [C, C]; dU', dR [C, bv].
template <class T, class Acc>
MNEMO_HD void state_backward_block(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    state_backward_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  StateTiles<Acc> s(arena, p);  // r: dU', u: dR
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, BV = p.bv, bvn = at.bvn;
  const int64_t chunks = (at.rows + C - 1) / C;
  const Acc scale = static_cast<Acc>(p.scale);
  Acc* dS = state_at(a.dh0, p, at.seq, at.head, at.v0);
  {
    const Acc* init = a.dht ? state_at(a.dht, p, at.seq, at.head, at.v0) : nullptr;
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      dS[static_cast<int64_t>(d) * V + col] = init ? init[static_cast<int64_t>(d) * V + col] : Acc(0);
    }
  }
  grid::barrier();
  for (int64_t n = chunks - 1; n >= 0; --n) {
    const int64_t r0 = at.row0 + n * C;
    const int c = static_cast<int>(at.rows - n * C < C ? at.rows - n * C : C);
    const Acc* linv = linv_at(a.linv, p, at.chunk0 + n, at.head);
    Acc* dh = state_at(a.dh, p, at.chunk0 + n, at.head, at.v0);
    // Phase: gates, L⁻¹, and dh[chunk] = dS.
    load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
    MNEMO_FOR_LANES(e, c * c, lanes) { s.l[(e / c) * C + e % c] = linv[(e / c) * C + e % c]; }
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      dh[static_cast<int64_t>(d) * V + col] = dS[static_cast<int64_t>(d) * V + col];
    }
    grid::barrier();
    prefix_gates<Acc>(c, s.gates, lanes);
    grid::barrier();
    const Acc bc = s.gates.b[c - 1];
    // Phase: dU' = D + Kd dS.
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int j = e / bvn, col = e % bvn;
      Acc kd = 0;
      for (int d = 0; d < K; ++d)
        kd += load<Acc>(a.k[row_at(p, r0 + j, at.head, K, d)]) * dS[static_cast<int64_t>(d) * V + col];
      s.r[j * BV + col] = a.dr[row_at(p, r0 + j, at.head, V, at.v0 + col)] + exp_acc(bc - s.gates.b[j]) * kd;
    }
    grid::barrier();
    // Phase: dR = L⁻ᵀ dU' (into dr for the gradient stage).
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int j = e / bvn, col = e % bvn;
      Acc acc = 0;
      for (int i = j; i < c; ++i) acc += s.l[i * C + j] * s.r[i * BV + col];
      s.u[j * BV + col] = acc;
      a.dr[row_at(p, r0 + j, at.head, V, at.v0 + col)] = acc;
    }
    grid::barrier();
    // Phase: dS ← e^{b_c} dS + Σ_i e^{b_i} (Q_i dO_i - β_i k_i dR_i) (each entry reads only itself of dS).
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      Acc acc = exp_acc(bc) * dS[static_cast<int64_t>(d) * V + col];
      for (int i = 0; i < c; ++i) {
        const Acc qd = scale * load<Acc>(a.q[row_at(p, r0 + i, at.head, K, d)]);
        const Acc kd = load<Acc>(a.k[row_at(p, r0 + i, at.head, K, d)]);
        const Acc dout = load<Acc>(a.dout[row_at(p, r0 + i, at.head, V, at.v0 + col)]);
        acc += exp_acc(s.gates.b[i]) * (qd * dout - s.gates.beta[i] * kd * s.u[i * BV + col]);
      }
      dS[static_cast<int64_t>(d) * V + col] = acc;
    }
    grid::barrier();
  }
}

// gradients of one (chunk, head, V tile). Tiles: gates; dP Γ, dA β Γ [C, C]; U', dO, dR [C, bv]; per-row
// accumulators of db, dβ, t and the <S, dS> sum.
template <class Acc>
struct GradientTiles {
  Gates<Acc> gates;
  Acc *gp, *ga, *u, *dout, *dr, *db, *dbeta, *t, *sds;
  MNEMO_HD GradientTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cc = static_cast<std::size_t>(p.chunk) * p.chunk, cv = static_cast<std::size_t>(p.chunk) * p.bv;
    gp = s.take<Acc>(cc);
    ga = s.take<Acc>(cc);
    u = s.take<Acc>(cv);
    dout = s.take<Acc>(cv);
    dr = s.take<Acc>(cv);
    db = s.take<Acc>(p.chunk);
    dbeta = s.take<Acc>(p.chunk);
    t = s.take<Acc>(p.chunk);
    sds = s.take<Acc>(1);
  }
};

template <class T, class Acc>
MNEMO_HD void gradient_block(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  if constexpr (kTensorCores<T>) {
    gradient_block_mma(a, block, shared, lanes);
    return;
  }
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  GradientTiles<Acc> s(arena, p);
  const Gates<Acc>& f = s.gates;
  const int K = p.key_dim, V = p.value_dim, H = p.heads, C = p.chunk, BV = p.bv, bvn = at.bvn, c = at.c;
  const int64_t total_rows = p.cu_seqlens[p.num_seqs], r0 = at.r0;
  const Acc scale = static_cast<Acc>(p.scale);
  const Acc* S = state_at(a.h, p, at.chunk, at.head, at.v0);
  const Acc* dS = state_at(a.dh, p, at.chunk, at.head, at.v0);
  Acc* dq = a.dq + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dk = a.dk + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dbeta = a.dbeta + static_cast<int64_t>(at.vt) * total_rows * H;
  Acc* dg = a.g ? a.dg + static_cast<int64_t>(at.vt) * total_rows * H : nullptr;
  // Phase: tiles and zeroed accumulators.
  load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    const int64_t at_v = row_at(p, r0 + i, at.head, V, at.v0 + col);
    s.u[i * BV + col] = a.u[at_v];
    s.dout[i * BV + col] = load<Acc>(a.dout[at_v]);
    s.dr[i * BV + col] = a.dr[at_v];
  }
  MNEMO_FOR_LANES(i, c, lanes) { s.db[i] = s.dbeta[i] = s.t[i] = Acc(0); }
  MNEMO_FOR_LANES(one, 1, lanes) { (void)one; s.sds[0] = Acc(0); }
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  grid::barrier();
  const Acc bc = f.b[c - 1];
  // Phase: per (i, j): dP Γ and dA β Γ into tiles; M = dP ⊙ P + dA ⊙ A into db_i (+) and db_j (-); dA Γ k_i·k_j
  // into dβ_i.
  MNEMO_FOR_LANES(e, c * c, lanes) {
    const int i = e / c, j = e % c;
    Acc gp = 0, ga = 0;
    if (j <= i) {
      Acc dp = 0, da = 0;
      for (int col = 0; col < bvn; ++col) {
        dp += s.dout[i * BV + col] * s.u[j * BV + col];
        da -= s.dr[i * BV + col] * s.u[j * BV + col];
      }
      const Acc gamma = exp_acc(f.b[i] - f.b[j]);
      const Acc qk = scale * dot_rows<T, Acc>(p, a.q, a.k, r0 + i, r0 + j, at.head);
      gp = dp * gamma;
      Acc m = dp * gamma * qk;
      if (j < i) {
        const Acc kk = dot_rows<T, Acc>(p, a.k, a.k, r0 + i, r0 + j, at.head);
        ga = da * gamma * f.beta[i];
        m += da * f.beta[i] * kk * gamma;
        grid::atomic_add(&s.dbeta[i], da * gamma * kk);
      }
      grid::atomic_add(&s.db[i], m);
      grid::atomic_add(&s.db[j], -m);
    }
    s.gp[i * C + j] = gp;
    s.ga[i * C + j] = ga;
  }
  // Phase (same): <S, dS> over the tile's columns (only dg needs it).
  if (dg) {
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      grid::atomic_add(&s.sds[0], S[static_cast<int64_t>(d) * V + col] * dS[static_cast<int64_t>(d) * V + col]);
    }
  }
  grid::barrier();
  // Phase: dq, dk per (i, d), with their row terms of db, dβ and t; dv per (i, col).
  MNEMO_FOR_LANES(e, c * K, lanes) {
    const int i = e / K, d = e % K;
    Acc y = 0, z = 0, w = 0;
    for (int col = 0; col < bvn; ++col) {
      const Acc s_dc = S[static_cast<int64_t>(d) * V + col];
      y += s.dout[i * BV + col] * s_dc;
      z += s.dr[i * BV + col] * s_dc;
      w += s.u[i * BV + col] * dS[static_cast<int64_t>(d) * V + col];
    }
    const Acc ebi = exp_acc(f.b[i]), decay_out = exp_acc(bc - f.b[i]);
    const Acc qid = scale * load<Acc>(a.q[row_at(p, r0 + i, at.head, K, d)]);
    const Acc kid = load<Acc>(a.k[row_at(p, r0 + i, at.head, K, d)]);
    Acc dqv = ebi * y, dkv = -f.beta[i] * ebi * z + decay_out * w;
    for (int j = 0; j <= i; ++j) dqv += s.gp[i * C + j] * load<Acc>(a.k[row_at(p, r0 + j, at.head, K, d)]);
    for (int i2 = i; i2 < c; ++i2) dkv += s.gp[i2 * C + i] * scale * load<Acc>(a.q[row_at(p, r0 + i2, at.head, K, d)]);
    for (int j = 0; j < i; ++j) dkv += s.ga[i * C + j] * load<Acc>(a.k[row_at(p, r0 + j, at.head, K, d)]);
    for (int i2 = i + 1; i2 < c; ++i2) dkv += s.ga[i2 * C + i] * load<Acc>(a.k[row_at(p, r0 + i2, at.head, K, d)]);
    const int64_t out = row_at(p, r0 + i, at.head, K, d);
    dq[out] = scale * dqv;
    dk[out] = dkv;
    grid::atomic_add(&s.db[i], ebi * (qid * y - f.beta[i] * kid * z));
    grid::atomic_add(&s.dbeta[i], -ebi * kid * z);
    grid::atomic_add(&s.t[i], decay_out * kid * w);
  }
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    a.dv[row_at(p, r0 + i, at.head, V, at.v0 + col)] = f.beta[i] * s.dr[i * BV + col];
  }
  grid::barrier();
  // Phase: dβ per row (its dR·v term here); db_i - t_i.
  MNEMO_FOR_LANES(i, c, lanes) {
    Acc dbt = s.dbeta[i];
    for (int col = 0; col < bvn; ++col)
      dbt += s.dr[i * BV + col] * load<Acc>(a.v[row_at(p, r0 + i, at.head, V, at.v0 + col)]);
    dbeta[(r0 + i) * H + at.head] = dbt;
    s.db[i] -= s.t[i];
  }
  grid::barrier();
  // Phase (one item): the chunk-end terms of db_c, then dg_r = Σ_{i>=r} db_i.
  if (dg) {
    MNEMO_FOR_LANES(one, 1, lanes) {
      (void)one;
      Acc extra = 0;
      for (int j = 0; j < c; ++j) extra += s.t[j];
      s.db[c - 1] += extra + exp_acc(bc) * s.sds[0];
      Acc acc = 0;
      for (int r = c - 1; r >= 0; --r) {
        acc += s.db[r];
        dg[(r0 + r) * H + at.head] = acc;
      }
    }
  }
}

// Shared bytes of each stage's tiles (the launch's dynamic shared memory; the host grid allocates the same).
template <class Tiles>
MNEMO_HD std::size_t tile_bytes(const Problem& p) {
  SharedArena s(nullptr);
  Tiles tiles(s, p);
  (void)tiles;
  return s.used();
}

}  // namespace mnemo::delta_rule_kernel
