// Fused chunk kernels of the delta rule and the gated delta rule (DeltaNet, arXiv:2406.06484; Gated DeltaNet,
// arXiv:2412.06464), forward and backward, as block code (runtime/kernels/block_grid.cuh): the same functions run
// as CUDA kernels (chunk_kernel.cu) and, over a sequential grid, on the host (chunk_fused.cpp), where the CPU tests
// check them against delta_rule_chunk and delta_rule_recurrent in fp64 and fp32 (tests/test_cuda_kernels_delta_rule.cpp).
//
// Grid: one block per (sequence, head, V tile of `bv` columns). Sequences are packed along T (fla's varlen
// convention): sequence s is rows [cu_seqlens[s], cu_seqlens[s+1]) of q, k [T, H, K], v [T, H, V], beta, g [T, H];
// its chunks are chunk_offsets[s] .. chunk_offsets[s+1]-1 of the chunk-start states h [chunks, H, K, V]. A batch of
// B equal-length sequences is the packing of its B rows (cu_seqlens = 0, T, 2T, ...). Each sequence starts from its
// own initial state h0[s] (zero when absent) and leaves its final state in ht[s].
// Every column of V is independent in the forward (the solve below runs per column), so a V tile needs only its
// columns of v, S and o. In the backward every gradient is a sum over V columns of per-column terms: a V tile writes
// its share of dq, dk, dβ, dg (the caller sums the tiles) and its columns of dv and dS0 exactly.
//
// Forward, per chunk of c rows (the last chunk of a sequence may be shorter; no padding), Q = scale·q, S the state
// before the chunk, b_i = Σ_{r<=i} g_r (inclusive in-chunk cumulative log decay; 0 without g = DeltaNet):
//   Γ_ij = e^{b_i - b_j} (j <= i)
//   A = stril(diag(β) K Kᵀ ⊙ Γ),  L = I + A,  P = tril(Q Kᵀ ⊙ Γ)
//   R = diag(β) V - diag(β e^b) K S
//   U' = L⁻¹ R  (forward substitution, per column)            = U − W S with U = L⁻¹ diag(β) V, W = L⁻¹ diag(β e^b) K
//   O = diag(e^b) Q S + P U'
//   S ← e^{b_c} S + (K ⊙ e^{b_c - b})ᵀ U'
// The chunk-start states are stored (h, as fla's) for the backward. R folds W S into the right-hand side, so one
// solve over the V columns replaces fla's two (U and W); the algebra is delta_rule/chunk.cpp's.
//
// Backward, chunks in reverse with dS (the adjoint of the state after the chunk; dS_T given or 0) carried. With
// S = h[chunk] and U' recomputed as above:
//   dU' = Pᵀ dO + Kd dS,   Kd_j = k_j e^{b_c - b_j}
//   dR  = L⁻ᵀ dU'          (backward substitution, per column)
//   dP  = dO U'ᵀ (j <= i),  dA = -dR U'ᵀ (j < i)
//   Y = dO Sᵀ,  Z = dR Sᵀ,  Wk = U' dSᵀ                       ([c, K] each)
//   dQ_i = e^{b_i} Y_i + Σ_{j<=i} dP_ij Γ_ij k_j
//   dk_i = -β_i e^{b_i} Z_i + Σ_{i'>=i} dP_i'i Γ_i'i Q_i' + Σ_{j<i} dA_ij β_i Γ_ij k_j + Σ_{i'>i} dA_i'i β_i' Γ_i'i k_i'
//          + e^{b_c - b_i} Wk_i
//   dv_i = β_i dR_i
//   dβ_i = dR_i·v_i - e^{b_i} k_i·Z_i + Σ_{j<i} dA_ij Γ_ij (k_i·k_j)
//   db_i = e^{b_i} Q_i·Y_i - β_i e^{b_i} k_i·Z_i + Σ_j M_ij - Σ_i' M_i'i - t_i + [i = c] (Σ_j t_j + e^{b_c} <S, dS>)
//          with M = dP ⊙ P + dA ⊙ A and t_j = e^{b_c - b_j} k_j·Wk_j
//   dg_r = Σ_{i>=r} db_i,   dq = scale·dQ
//   dS ← e^{b_c} dS + (diag(e^b) Q)ᵀ dO - (diag(β e^b) K)ᵀ dR   (the adjoint of the chunk-start state)
// After the first chunk dS is dS0.
//
// Precision: tiles, gates (b, Γ), the triangular solves and the states are in Acc (fp32 for fp32/bf16 inputs, fp64
// for fp64); inputs are read and o written in the element type T (float, double, grid::bf16). Gradients are
// written in Acc. Every phase below is one MNEMO_FOR_LANES loop over independent work items; phases are separated
// by grid::barrier(). A solve runs one column per lane (the rows of a column are sequential).
//
// Shared memory: the block's tiles in Acc (layouts below). When a layout exceeds the device's dynamic shared memory
// (chunk_kernel.cu: 99 KiB), the launcher gives each block a slice of a global workspace instead; the code is the same.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/kernels/block_grid.cuh"
#include "runtime/kernels/bf16.cuh"

namespace mnemo::delta_rule_kernel {

using grid::Lanes;
using grid::SharedArena;

using grid::bf16;
using grid::exp_acc;

template <class Acc, class T>
MNEMO_HD Acc load(const T& x) { return grid::load_as<Acc>(&x); }

// Sizes and the varlen packing shared by both passes.
struct Problem {
  int num_seqs;     // sequences packed along T
  int heads;        // H
  int key_dim;      // K
  int value_dim;    // V
  int chunk;        // C, rows per chunk
  int bv;           // V columns per block
  double scale;     // q scale
  const int32_t* cu_seqlens;     // [num_seqs + 1] row offsets
  const int32_t* chunk_offsets;  // [num_seqs + 1] chunk offsets into h

  MNEMO_HD int value_tiles() const { return (value_dim + bv - 1) / bv; }
  MNEMO_HD int blocks() const { return num_seqs * heads * value_tiles(); }
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
  const Acc* dht;    // [num_seqs, H, K, V], nullptr = zero
  Acc* dq;           // [value_tiles, T, H, K] per-tile shares
  Acc* dk;           // [value_tiles, T, H, K]
  Acc* dv;           // [T, H, V]
  Acc* dbeta;        // [value_tiles, T, H]
  Acc* dg;           // [value_tiles, T, H] (when g)
  Acc* dh0;          // [num_seqs, H, K, V]; also carries dS through the chunk loop
};

// The block's place: sequence, head, V tile, rows and chunks.
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

// Shared tiles of the forward (Acc): Q, K [C, K]; U [C, bv] (v, then R, then U'); A, P [C, C]; g, b, β [C].
template <class Acc>
struct ForwardTiles {
  Acc *q, *k, *u, *a, *pm, *graw, *b, *beta;
  MNEMO_HD ForwardTiles(SharedArena& s, const Problem& p) {
    const int C = p.chunk;
    q = s.take<Acc>(static_cast<std::size_t>(C) * p.key_dim);
    k = s.take<Acc>(static_cast<std::size_t>(C) * p.key_dim);
    u = s.take<Acc>(static_cast<std::size_t>(C) * p.bv);
    a = s.take<Acc>(static_cast<std::size_t>(C) * C);
    pm = s.take<Acc>(static_cast<std::size_t>(C) * C);
    graw = s.take<Acc>(C);
    b = s.take<Acc>(C);
    beta = s.take<Acc>(C);
  }
};

// Shared tiles of the backward: the forward's, plus v, dO, dR [C, bv]; M, B [C, C]; three [C, K] row-product tiles;
// per-row db, t and per-key <S, dS> partials.
template <class Acc>
struct BackwardTiles {
  ForwardTiles<Acc> f;
  Acc *v, *dout, *dr, *mm, *bb, *e1, *e2, *e3, *db, *t, *red;
  MNEMO_HD BackwardTiles(SharedArena& s, const Problem& p) : f(s, p) {
    const int C = p.chunk;
    const std::size_t cv = static_cast<std::size_t>(C) * p.bv, ck = static_cast<std::size_t>(C) * p.key_dim;
    v = s.take<Acc>(cv);
    dout = s.take<Acc>(cv);
    dr = s.take<Acc>(cv);
    mm = s.take<Acc>(static_cast<std::size_t>(C) * C);
    bb = s.take<Acc>(static_cast<std::size_t>(C) * C);
    e1 = s.take<Acc>(ck);
    e2 = s.take<Acc>(ck);
    e3 = s.take<Acc>(ck);
    db = s.take<Acc>(C);
    t = s.take<Acc>(C);
    red = s.take<Acc>(p.key_dim);
  }
};

template <class Acc>
MNEMO_HD std::size_t forward_shared_bytes(const Problem& p) {
  SharedArena s(nullptr);
  ForwardTiles<Acc> tiles(s, p);
  (void)tiles;
  return s.used();
}

template <class Acc>
MNEMO_HD std::size_t backward_shared_bytes(const Problem& p) {
  SharedArena s(nullptr);
  BackwardTiles<Acc> tiles(s, p);
  (void)tiles;
  return s.used();
}

// Phases shared by both passes for chunk rows [r0, r0 + c) of the block's sequence and head, S the chunk-start state
// (global, row stride V, columns from v0): loads Q, K, β, g; b; A, P; R; then U' = L⁻¹ R in tiles.u.
// `v_keep`, when set, receives v's tile too (the backward needs it for dβ).
template <class T, class Acc>
MNEMO_HD void chunk_prologue(const Problem& p, const Place& at, const T* q, const T* k, const T* v, const Acc* beta,
                             const Acc* g, const Acc* S, int64_t r0, int c, ForwardTiles<Acc>& s, Acc* v_keep,
                             Lanes lanes) {
  const int K = p.key_dim, V = p.value_dim, H = p.heads, C = p.chunk, BV = p.bv, bvn = at.bvn;
  const Acc scale = static_cast<Acc>(p.scale);
  // Phase: tiles.
  MNEMO_FOR_LANES(e, c * K, lanes) {
    const int i = e / K, d = e % K;
    const int64_t at_qk = ((r0 + i) * H + at.head) * static_cast<int64_t>(K) + d;
    s.q[i * K + d] = scale * load<Acc>(q[at_qk]);
    s.k[i * K + d] = load<Acc>(k[at_qk]);
  }
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    const Acc x = load<Acc>(v[((r0 + i) * H + at.head) * static_cast<int64_t>(V) + at.v0 + col]);
    s.u[i * BV + col] = x;
    if (v_keep) v_keep[i * BV + col] = x;
  }
  MNEMO_FOR_LANES(i, c, lanes) {
    s.beta[i] = beta[(r0 + i) * H + at.head];
    s.graw[i] = g ? g[(r0 + i) * H + at.head] : Acc(0);
  }
  grid::barrier();
  // Phase: b_i = Σ_{r<=i} g_r (each row sums its prefix in the same order).
  MNEMO_FOR_LANES(i, c, lanes) {
    Acc acc = 0;
    for (int r = 0; r <= i; ++r) acc += s.graw[r];
    s.b[i] = acc;
  }
  grid::barrier();
  // Phase: A, P (one entry per item) and R in place of v.
  MNEMO_FOR_LANES(e, c * c, lanes) {
    const int i = e / c, j = e % c;
    Acc kk = 0, qk = 0;
    if (j <= i) {
      for (int d = 0; d < K; ++d) {
        kk += s.k[i * K + d] * s.k[j * K + d];
        qk += s.q[i * K + d] * s.k[j * K + d];
      }
    }
    const Acc gamma = j <= i ? exp_acc(s.b[i] - s.b[j]) : Acc(0);
    s.a[i * C + j] = j < i ? s.beta[i] * kk * gamma : Acc(0);
    s.pm[i * C + j] = j <= i ? qk * gamma : Acc(0);
  }
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    Acc ks = 0;
    for (int d = 0; d < K; ++d) ks += s.k[i * K + d] * S[static_cast<int64_t>(d) * V + col];
    s.u[i * BV + col] = s.beta[i] * (s.u[i * BV + col] - exp_acc(s.b[i]) * ks);
  }
  grid::barrier();
  // Phase: U' = L⁻¹ R, forward substitution, one column per lane.
  MNEMO_FOR_LANES(col, bvn, lanes) {
    for (int i = 1; i < c; ++i) {
      Acc acc = s.u[i * BV + col];
      for (int j = 0; j < i; ++j) acc -= s.a[i * C + j] * s.u[j * BV + col];
      s.u[i * BV + col] = acc;
    }
  }
  grid::barrier();
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

// Forward of one block: o, the chunk-start states h and the final state ht for the block's columns.
template <class T, class Acc>
MNEMO_HD void forward_block(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  ForwardTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, H = p.heads, C = p.chunk, BV = p.bv, bvn = at.bvn;
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
    chunk_prologue<T, Acc>(p, at, a.q, a.k, a.v, a.beta, a.g, S, r0, c, s, nullptr, lanes);
    // Phase: O = diag(e^b) Q S + P U' and S_next = e^{b_c} S + (K ⊙ e^{b_c - b})ᵀ U' (different buffers).
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int i = e / bvn, col = e % bvn;
      Acc qs = 0, pu = 0;
      for (int d = 0; d < K; ++d) qs += s.q[i * K + d] * S[static_cast<int64_t>(d) * V + col];
      for (int j = 0; j <= i; ++j) pu += s.pm[i * C + j] * s.u[j * BV + col];
      grid::store_as<Acc>(&a.o[((r0 + i) * H + at.head) * static_cast<int64_t>(V) + at.v0 + col],
                          exp_acc(s.b[i]) * qs + pu);
    }
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      const Acc bc = s.b[c - 1];
      Acc w = 0;
      for (int j = 0; j < c; ++j) w += s.k[j * K + d] * exp_acc(bc - s.b[j]) * s.u[j * BV + col];
      next[static_cast<int64_t>(d) * V + col] = exp_acc(bc) * S[static_cast<int64_t>(d) * V + col] + w;
    }
    grid::barrier();
  }
}

// Backward of one block: its share of dq, dk, dβ, dg; its columns of dv and dS0 (dh0, which carries dS meanwhile).
template <class T, class Acc>
MNEMO_HD void backward_block(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  BackwardTiles<Acc> s(arena, p);
  ForwardTiles<Acc>& f = s.f;
  const int K = p.key_dim, V = p.value_dim, H = p.heads, C = p.chunk, BV = p.bv, bvn = at.bvn;
  const int64_t chunks = (at.rows + C - 1) / C;
  const int64_t total_rows = p.cu_seqlens[p.num_seqs];
  const Acc scale = static_cast<Acc>(p.scale);
  Acc* dS = state_at(a.dh0, p, at.seq, at.head, at.v0);
  Acc* dq = a.dq + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dk = a.dk + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dbeta = a.dbeta + static_cast<int64_t>(at.vt) * total_rows * H;
  Acc* dg = a.g ? a.dg + static_cast<int64_t>(at.vt) * total_rows * H : nullptr;
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
    const Acc* S = state_at(a.h, p, at.chunk0 + n, at.head, at.v0);
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int i = e / bvn, col = e % bvn;
      s.dout[i * BV + col] = load<Acc>(a.dout[((r0 + i) * H + at.head) * static_cast<int64_t>(V) + at.v0 + col]);
    }
    chunk_prologue<T, Acc>(p, at, a.q, a.k, a.v, a.beta, a.g, S, r0, c, f, s.v, lanes);
    const Acc bc = f.b[c - 1];
    // Phase: dU' = Pᵀ dO + Kd dS (into dr).
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int j = e / bvn, col = e % bvn;
      Acc acc = 0, kd = 0;
      for (int i = j; i < c; ++i) acc += f.pm[i * C + j] * s.dout[i * BV + col];
      for (int d = 0; d < K; ++d) kd += f.k[j * K + d] * dS[static_cast<int64_t>(d) * V + col];
      s.dr[j * BV + col] = acc + exp_acc(bc - f.b[j]) * kd;
    }
    grid::barrier();
    // Phase: dR = L⁻ᵀ dU', backward substitution, one column per lane.
    MNEMO_FOR_LANES(col, bvn, lanes) {
      for (int j = c - 2; j >= 0; --j) {
        Acc acc = s.dr[j * BV + col];
        for (int i = j + 1; i < c; ++i) acc -= f.a[i * C + j] * s.dr[i * BV + col];
        s.dr[j * BV + col] = acc;
      }
    }
    grid::barrier();
    // Phase: per (i, j): dP Γ over P, dA β Γ over A, M = dP ⊙ P + dA ⊙ A, and dβ's dA Γ (k_i·k_j).
    MNEMO_FOR_LANES(e, c * c, lanes) {
      const int i = e / c, j = e % c;
      Acc gp = 0, ga = 0, m = 0, bbv = 0;
      if (j <= i) {
        Acc dp = 0, da = 0;
        for (int col = 0; col < bvn; ++col) {
          dp += s.dout[i * BV + col] * f.u[j * BV + col];
          da -= s.dr[i * BV + col] * f.u[j * BV + col];
        }
        const Acc gamma = exp_acc(f.b[i] - f.b[j]);
        gp = dp * gamma;
        m = dp * f.pm[i * C + j];
        if (j < i) {
          Acc kk = 0;
          for (int d = 0; d < K; ++d) kk += f.k[i * K + d] * f.k[j * K + d];
          ga = da * gamma * f.beta[i];
          m += da * f.a[i * C + j];
          bbv = da * gamma * kk;
        }
      }
      f.pm[i * C + j] = gp;
      f.a[i * C + j] = ga;
      s.mm[i * C + j] = m;
      s.bb[i * C + j] = bbv;
    }
    grid::barrier();
    // Phase: dq, dk per (i, d), with the row products for db, dβ; dv per (i, col); <S, dS> per key row.
    MNEMO_FOR_LANES(e, c * K, lanes) {
      const int i = e / K, d = e % K;
      Acc y = 0, z = 0, w = 0;
      for (int col = 0; col < bvn; ++col) {
        const Acc s_dc = S[static_cast<int64_t>(d) * V + col];
        y += s.dout[i * BV + col] * s_dc;
        z += s.dr[i * BV + col] * s_dc;
        w += f.u[i * BV + col] * dS[static_cast<int64_t>(d) * V + col];
      }
      const Acc ebi = exp_acc(f.b[i]), decay_out = exp_acc(bc - f.b[i]);
      Acc dqv = ebi * y, dkv = -f.beta[i] * ebi * z + decay_out * w;
      for (int j = 0; j <= i; ++j) dqv += f.pm[i * C + j] * f.k[j * K + d];
      for (int i2 = i; i2 < c; ++i2) dkv += f.pm[i2 * C + i] * f.q[i2 * K + d];
      for (int j = 0; j < i; ++j) dkv += f.a[i * C + j] * f.k[j * K + d];
      for (int i2 = i + 1; i2 < c; ++i2) dkv += f.a[i2 * C + i] * f.k[i2 * K + d];
      const int64_t out = ((r0 + i) * H + at.head) * static_cast<int64_t>(K) + d;
      dq[out] = scale * dqv;
      dk[out] = dkv;
      s.e1[i * K + d] = ebi * (f.q[i * K + d] * y - f.beta[i] * f.k[i * K + d] * z);
      s.e2[i * K + d] = -ebi * f.k[i * K + d] * z;
      s.e3[i * K + d] = decay_out * f.k[i * K + d] * w;
    }
    MNEMO_FOR_LANES(e, c * bvn, lanes) {
      const int i = e / bvn, col = e % bvn;
      a.dv[((r0 + i) * H + at.head) * static_cast<int64_t>(V) + at.v0 + col] = f.beta[i] * s.dr[i * BV + col];
    }
    MNEMO_FOR_LANES(d, K, lanes) {
      Acc acc = 0;
      for (int col = 0; col < bvn; ++col)
        acc += S[static_cast<int64_t>(d) * V + col] * dS[static_cast<int64_t>(d) * V + col];
      s.red[d] = acc;
    }
    grid::barrier();
    // Phase: per row db (before the cross-row terms), t, dβ; the dS update (each entry reads only itself of dS).
    MNEMO_FOR_LANES(i, c, lanes) {
      Acc dbv = 0, t = 0, e2 = 0;
      for (int d = 0; d < K; ++d) {
        dbv += s.e1[i * K + d];
        t += s.e3[i * K + d];
        e2 += s.e2[i * K + d];
      }
      for (int j = 0; j < c; ++j) dbv += s.mm[i * C + j] - s.mm[j * C + i];
      Acc dbt = e2;
      for (int col = 0; col < bvn; ++col) dbt += s.dr[i * BV + col] * s.v[i * BV + col];
      for (int j = 0; j < i; ++j) dbt += s.bb[i * C + j];
      dbeta[(r0 + i) * H + at.head] = dbt;
      s.db[i] = dbv - t;
      s.t[i] = t;
    }
    MNEMO_FOR_LANES(e, K * bvn, lanes) {
      const int d = e / bvn, col = e % bvn;
      Acc acc = exp_acc(bc) * dS[static_cast<int64_t>(d) * V + col];
      for (int i = 0; i < c; ++i) {
        const Acc ebi = exp_acc(f.b[i]);
        acc += ebi * (f.q[i * K + d] * s.dout[i * BV + col] - f.beta[i] * f.k[i * K + d] * s.dr[i * BV + col]);
      }
      dS[static_cast<int64_t>(d) * V + col] = acc;
    }
    grid::barrier();
    // Phase (one item): the chunk-end terms of db_c, then dg_r = Σ_{i>=r} db_i.
    if (dg) {
      MNEMO_FOR_LANES(one, 1, lanes) {
        (void)one;
        Acc extra = 0, sds = 0;
        for (int j = 0; j < c; ++j) extra += s.t[j];
        for (int d = 0; d < K; ++d) sds += s.red[d];
        s.db[c - 1] += extra + exp_acc(bc) * sds;
        Acc acc = 0;
        for (int r = c - 1; r >= 0; --r) {
          acc += s.db[r];
          dg[(r0 + r) * H + at.head] = acc;
        }
      }
    }
    grid::barrier();
  }
}

}  // namespace mnemo::delta_rule_kernel
