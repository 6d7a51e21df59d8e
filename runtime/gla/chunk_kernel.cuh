// Chunk kernels of the gated-linear-attention family, forward and backward, as block code
// (runtime/kernels/block_grid.cuh): the same functions run as CUDA kernels (chunk_kernel.cu) and, over a
// sequential grid, on the host (chunk_fused.cpp), where the tests check them against gla_chunk / gla_recurrent,
// simple_gla_chunk and linear_attn_chunk in fp64 and fp32.
//
// Two stages a pass. The state stage runs one block per (sequence, head, value tile of tile_v columns); it walks
// the sequence's chunks of C tokens, carrying its K × tile_v slice of the state in shared memory (fp32, fp64 for
// fp64 inputs), and stores every chunk-start state (forward) or the adjoint of every chunk-end state (backward).
// The output / gradient stage then runs one block per (chunk, head, value tile), all chunks at once, reading its
// chunk's states from those buffers. Per chunk of L <= C
// rows, with Q = scale · q, the in-chunk cumulative log gate B_i = Σ_{r<=i} g_r (<= 0, non-increasing in i;
// key-wise [L, K], a scalar per row for simple GLA / RetNet, zero for linear attention) and S the chunk-start state
// (GLA, arXiv:2312.06635 §4; the fla chunk form):
//   O     = (Q ⊙ e^B) S + A V,           A_ij = Σ_c Q_ic K_jc e^{B_ic − B_jc}   (i >= j, else 0)
//   S'    = D S + (K ⊙ F)ᵀ V,            D = Diag(e^{B_L}),  F_jc = e^{B_Lc − B_jc}
// No exp of a positive number is formed (docs/models.md#numerical-stability rule 4). The rows are cut into
// sub-blocks of c rows; block I has first row f_I and last row l_I, r_I = B_{f_I}, R_I = B_{l_I}. For j in an
// earlier block J < I,
//   e^{B_ic − B_jc} = e^{B_ic − r_Ic} · e^{r_Ic − R_Jc} · e^{R_Jc − B_jc}          (all three exponents <= 0)
// so A's off-diagonal blocks are Σ_c Qn_ic M_IJc Kn_jc with Qn = Q ⊙ e^{B − r}, Kn = K ⊙ e^{R − B} and the
// small M_IJc = e^{r_Ic − R_Jc}; a diagonal block takes e^{B_ic − B_jc} (j <= i) per entry. The same factors give
// Q ⊙ e^B = Qn ⊙ e^{r} and K ⊙ F = Kn ⊙ e^{B_L − R} without further exps.
//
// Backward, from dO and the gradient dS' of each chunk-end state (the next chunk's dS, or d(final state); the
// state stage's chunk loop in reverse order); the chunk-start states S (and S') come from the forward's chunk_states:
//   dA_ij = dO_i · V_j                                             (i >= j)
//   dV_j  = Σ_{i>=j} A_ij dO_i + (K ⊙ F)_j dS'
//   dQ_ic = e^{B_ic} (dO_i · S_c) + Σ_{j<=i} dA_ij K_jc e^{B_ic − B_jc}
//   dK_jc = F_jc (V_j · dS'_c)    + Σ_{i>=j} dA_ij Q_ic e^{B_ic − B_jc}
//   dB_ic = Q_ic dQ_ic − K_ic dK_ic + [i = L] Σ_v dS'_cv S'_cv     (B enters e^B, A, F and D)
//   dg_rc = Σ_{i>=r} dB_ic          (scalar gate: also summed over c)
//   dS    = D dS' + (Q ⊙ e^B)ᵀ dO                                  (dS of the first chunk is d(initial state))
//   dq    = scale · dQ
// The two intra sums use the sub-block factors as the forward does: for j in J < I(i),
//   Σ_j dA_ij K_jc e^{B_ic − B_jc} = e^{B_ic − r_Ic} Σ_{J<I} M_IJc Σ_{j∈J} dA_ij Kn_jc, and
//   Σ_i dA_ij Q_ic e^{B_ic − B_jc} = e^{R_Jc − B_jc} Σ_{I>J} M_IJc Σ_{i∈I} dA_ij Qn_ic.
// dq, dk and dg depend on every value column: each value tile writes its partial sums ([value_tiles, ...]) and the
// caller adds them; dv and d(initial state) belong to one tile each.
//
// Work items of a phase are spread over the block's lanes; each item owns its output entry (no atomics), so the
// host run's results do not depend on the lane count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/gla/chunk_kernel.h"
#include "runtime/kernels/bf16.cuh"
#include "runtime/kernels/block_grid.cuh"

namespace mnemo::gla_kernel {

// A SharedArena stand-in that only counts bytes (the launch size of the same carve-up).
struct ByteCounter {
  std::size_t used_bytes = 0;
  template <class T>
  MNEMO_HD T* take(std::size_t count) {
    used_bytes += (count * sizeof(T) + 15) / 16 * 16;
    return nullptr;
  }
  MNEMO_HD std::size_t used() const { return used_bytes; }
};

// Shared tiles of one block; the backward adds its own after these.
template <class Acc>
struct Tiles {
  Acc *q, *k, *b, *qn, *kn, *v, *a, *s, *m, *er, *g, *d;  // common
  Acc *d_o, *da, *s_end, *ds, *dq, *dk, *row_sum;          // backward only
  // Row strides: one more than the row (K + 1, tile_v + 1, K + 1 for key-wise gates) so that the lanes of a warp
  // walking down a column hit distinct shared-memory banks.
  int kp, vp, bp;
};

MNEMO_HD int gate_width(const Problem& p) { return p.gate == Gate::kKeyWise ? static_cast<int>(p.key_dim) : 1; }
MNEMO_HD int sub_blocks(const Problem& p) { return (p.tiling.chunk + p.tiling.sub_chunk - 1) / p.tiling.sub_chunk; }

template <class Acc, class Arena>
MNEMO_HD Tiles<Acc> carve(Arena& arena, const Problem& p, bool backward) {
  const std::size_t C = p.tiling.chunk, K = p.key_dim, BV = p.tiling.tile_v, S = sub_blocks(p);
  Tiles<Acc> t{};
  t.kp = static_cast<int>(K) + 1;
  t.vp = static_cast<int>(BV) + 1;
  t.bp = gate_width(p) > 1 ? gate_width(p) + 1 : 1;
  const std::size_t KP = t.kp, VP = t.vp;
  t.q = arena.template take<Acc>(C * KP);
  t.k = arena.template take<Acc>(C * KP);
  t.b = arena.template take<Acc>(C * t.bp);
  t.qn = arena.template take<Acc>(C * KP);
  t.kn = arena.template take<Acc>(C * KP);
  t.v = arena.template take<Acc>(C * VP);
  t.a = arena.template take<Acc>(C * C);
  t.s = arena.template take<Acc>(K * VP);
  t.m = arena.template take<Acc>(S * S * K);
  t.er = arena.template take<Acc>(S * K);
  t.g = arena.template take<Acc>(S * K);
  t.d = arena.template take<Acc>(K);
  if (backward) {
    t.d_o = arena.template take<Acc>(C * VP);
    t.da = arena.template take<Acc>(C * C);
    t.s_end = arena.template take<Acc>(K * VP);
    t.ds = arena.template take<Acc>(K * VP);
    t.dq = arena.template take<Acc>(C * KP);
    t.dk = arena.template take<Acc>(C * KP);
    t.row_sum = arena.template take<Acc>(C);
  }
  return t;
}

template <class Acc>
std::size_t shared_bytes(const Problem& p, bool backward) {
  ByteCounter counter;
  carve<Acc>(counter, p, backward);
  return counter.used();
}

// Token span and first state slot of sequence n.
MNEMO_HD void sequence_span(const Problem& p, int64_t n, int64_t& bos, int64_t& len, int64_t& slot0) {
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n];
    len = p.cu_seqlens[n + 1] - bos;
    slot0 = p.state_slots[n];
  } else {
    bos = n * p.seq_len;
    len = p.seq_len;
    slot0 = n * (chunks_of(p.seq_len, p.tiling.chunk) + 1);
  }
}

// Which (sequence, head, value tile) a block is.
struct BlockCoords {
  int64_t n, h, v0;
  int bv;
};
MNEMO_HD BlockCoords block_coords(const Problem& p, int64_t block) {
  const int64_t NV = value_tiles(p);
  BlockCoords bc;
  const int64_t vt = block % NV;
  bc.h = (block / NV) % p.heads;
  bc.n = block / NV / p.heads;
  bc.v0 = vt * p.tiling.tile_v;
  const int64_t rest = p.value_dim - bc.v0;
  bc.bv = static_cast<int>(rest < p.tiling.tile_v ? rest : p.tiling.tile_v);
  return bc;
}

// Phases shared by both directions for one chunk of L rows starting at token t0 (absolute row bos + t0):
// load Q (scaled), K and the gates, then B (cumsum), then the sub-block factors.
template <class E, class Acc>
MNEMO_HD void load_chunk_keys(const Problem& p, const E* q, const E* k, const Acc* gate, int64_t row0, int64_t h,
                              int L, const Tiles<Acc>& t, grid::Lanes lanes) {
  const int64_t H = p.heads, K = p.key_dim;
  const Acc scale = static_cast<Acc>(p.scale);
  const int gw = gate_width(p);
  MNEMO_FOR_LANES(x, L * static_cast<int>(K), lanes) {
    const int64_t i = x / K, col = x % K;
    const int64_t at = ((row0 + i) * H + h) * K + col;
    t.q[i * t.kp + col] = scale * grid::load_as<Acc>(q + at);
    t.k[i * t.kp + col] = grid::load_as<Acc>(k + at);
  }
  MNEMO_FOR_LANES(x, L * gw, lanes) {
    const int64_t i = x / gw, col = x % gw;
    t.b[i * t.bp + col] = gate ? gate[((row0 + i) * H + h) * gw + col] : Acc(0);
  }
}

template <class Acc>
MNEMO_HD void gate_cumsum(const Problem& p, int L, const Tiles<Acc>& t, grid::Lanes lanes) {
  const int gw = gate_width(p);
  MNEMO_FOR_LANES(col, gw, lanes) {
    for (int i = 1; i < L; ++i) t.b[i * t.bp + col] += t.b[(i - 1) * t.bp + col];
  }
}

// B_ic from the tile (key-wise: column c; scalar or none: the row's one value).
template <class Acc>
MNEMO_HD Acc cum_gate(const Tiles<Acc>& t, int gw, int i, int col) {
  return t.b[i * t.bp + (gw == 1 ? 0 : col)];
}

template <class Acc>
MNEMO_HD void sub_block_factors(const Problem& p, int L, const Tiles<Acc>& t, grid::Lanes lanes) {
  const int K = static_cast<int>(p.key_dim), c = p.tiling.sub_chunk, gw = gate_width(p);
  const int nsub = (L + c - 1) / c, S = sub_blocks(p);
  auto last_row = [&](int I) { return (I * c + c < L ? I * c + c : L) - 1; };
  MNEMO_FOR_LANES(x, L * K, lanes) {
    const int i = x / K, col = x % K, I = i / c;
    const Acc Bi = cum_gate(t, gw, i, col);
    const int at = i * t.kp + col;
    t.qn[at] = t.q[at] * grid::exp_acc(Bi - cum_gate(t, gw, I * c, col));
    t.kn[at] = t.k[at] * grid::exp_acc(cum_gate(t, gw, last_row(I), col) - Bi);
  }
  MNEMO_FOR_LANES(x, nsub * nsub * K, lanes) {
    const int col = x % K, J = (x / K) % nsub, I = x / K / nsub;
    if (J < I)
      t.m[(I * S + J) * K + col] = grid::exp_acc(cum_gate(t, gw, I * c, col) - cum_gate(t, gw, last_row(J), col));
  }
  MNEMO_FOR_LANES(x, nsub * K, lanes) {
    const int col = x % K, I = x / K;
    t.er[x] = grid::exp_acc(cum_gate(t, gw, I * c, col));
    t.g[x] = grid::exp_acc(cum_gate(t, gw, L - 1, col) - cum_gate(t, gw, last_row(I), col));
  }
  MNEMO_FOR_LANES(col, K, lanes) { t.d[col] = grid::exp_acc(cum_gate(t, gw, L - 1, col)); }
}

// A_ij for j <= i (entries above the diagonal are not read).
template <class Acc>
MNEMO_HD Acc intra_score(const Problem& p, const Tiles<Acc>& t, int i, int j) {
  const int K = static_cast<int>(p.key_dim), c = p.tiling.sub_chunk, gw = gate_width(p), S = sub_blocks(p);
  const int I = i / c, J = j / c;
  Acc sum = 0;
  if (J < I) {
    const Acc* m = t.m + (I * S + J) * K;
    for (int col = 0; col < K; ++col) sum += t.qn[i * t.kp + col] * m[col] * t.kn[j * t.kp + col];
  } else {
    for (int col = 0; col < K; ++col)
      sum += t.q[i * t.kp + col] * t.k[j * t.kp + col] *
             grid::exp_acc(cum_gate(t, gw, i, col) - cum_gate(t, gw, j, col));
  }
  return sum;
}

// Which chunk a (slot, head, value tile) block of the chunk-parallel stages is: slots are the chunk-state slots
// (each sequence's N chunk-start states, then its final state); a final-state slot is no chunk (false).
struct ChunkCoords {
  BlockCoords bc;
  int64_t bos, len, slot0, ci;
};
MNEMO_HD bool chunk_coords(const Problem& p, int64_t block, ChunkCoords& cc) {
  const int64_t NV = value_tiles(p);
  const int64_t slot = block / NV / p.heads;
  cc.bc = block_coords(p, block % (NV * p.heads));
  int64_t n;
  if (p.cu_seqlens) {
    int64_t lo = 0, hi = p.sequences;  // state_slots[lo] <= slot < state_slots[hi]
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (p.state_slots[mid] <= slot) lo = mid; else hi = mid;
    }
    n = lo;
  } else {
    n = slot / (chunks_of(p.seq_len, p.tiling.chunk) + 1);
  }
  cc.bc.n = n;
  sequence_span(p, n, cc.bos, cc.len, cc.slot0);
  cc.ci = slot - cc.slot0;
  return cc.ci < chunks_of(cc.len, p.tiling.chunk);
}

}  // namespace mnemo::gla_kernel

#include "runtime/gla/chunk_kernel_mma.cuh"

namespace mnemo::gla_kernel {

// The dynamic shared memory of a pass's blocks: the most its two stages take, each with the tiles of the form it runs
// (tensor cores or scalar).
template <class E, class Acc>
std::size_t pass_shared_bytes(const Problem& p, bool backward) {
  const std::size_t scalar = shared_bytes<Acc>(p, backward);
  const std::size_t state = on_tensor_cores<E>(p)
                                ? mma_stage_bytes<Acc>(p, backward ? MmaStage::state_backward : MmaStage::state_forward)
                                : scalar;
  const std::size_t chunk =
      on_tensor_cores<E>(p) ? mma_stage_bytes<Acc>(p, backward ? MmaStage::gradients : MmaStage::output) : scalar;
  return state > chunk ? state : chunk;
}

template <class E, class Acc>
MNEMO_HD void state_forward_block(const Problem& p, const ForwardPointers& ptr, int64_t block, void* shared,
                            grid::Lanes lanes) {
  if constexpr (std::is_same<E, grid::bf16>::value) {
    if (on_tensor_cores<E>(p)) {
      state_forward_block_mma<E, Acc>(p, ptr, block, shared, lanes);
      return;
    }
  }
  grid::SharedArena arena(shared);
  const Tiles<Acc> t = carve<Acc>(arena, p, false);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* s0 = static_cast<const Acc*>(ptr.s0);
  Acc* final_state = static_cast<Acc*>(ptr.final_state);
  Acc* chunk_states = static_cast<Acc*>(ptr.chunk_states);

  const BlockCoords bc = block_coords(p, block);
  int64_t bos, len, slot0;
  sequence_span(p, bc.n, bos, len, slot0);
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, c = p.tiling.sub_chunk;
  const int bv = bc.bv;
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };

  MNEMO_FOR_LANES(x, K * bv, lanes) {
    const int row = x / bv, col = x % bv;
    t.s[row * t.vp + col] = s0 ? s0[state_at(bc.n, row, col)] : Acc(0);
  }
  grid::barrier();
  const int64_t N = chunks_of(len, C);
  for (int64_t ci = 0; ci < N; ++ci) {
    const int64_t row0 = bos + ci * C;
    const int L = static_cast<int>(len - ci * C < C ? len - ci * C : C);
    load_chunk_keys<E, Acc>(p, q, k, gate, row0, h, L, t, lanes);
    MNEMO_FOR_LANES(x, L * bv, lanes) {
      const int i = x / bv, col = x % bv;
      t.v[i * t.vp + col] = grid::load_as<Acc>(v + ((row0 + i) * H + h) * V + v0 + col);
    }
    MNEMO_FOR_LANES(x, K * bv, lanes) {
      const int row = x / bv, col = x % bv;
      chunk_states[state_at(slot0 + ci, row, col)] = t.s[row * t.vp + col];
    }
    grid::barrier();
    gate_cumsum(p, L, t, lanes);
    grid::barrier();
    sub_block_factors(p, L, t, lanes);
    grid::barrier();
    // S <- D S + (Kn ⊙ e^{B_L − R})ᵀ V
    MNEMO_FOR_LANES(x, K * bv, lanes) {
      const int r = x / bv, col = x % bv;
      Acc sum = t.d[r] * t.s[r * t.vp + col];
      for (int j = 0; j < L; ++j) sum += t.kn[j * t.kp + r] * t.g[(j / c) * K + r] * t.v[j * t.vp + col];
      t.s[r * t.vp + col] = sum;
    }
    grid::barrier();
  }
  MNEMO_FOR_LANES(x, K * bv, lanes) {
    const int row = x / bv, col = x % bv;
    final_state[state_at(bc.n, row, col)] = t.s[row * t.vp + col];
    chunk_states[state_at(slot0 + N, row, col)] = t.s[row * t.vp + col];
  }
}


template <class E, class Acc>
MNEMO_HD void output_block(const Problem& p, const ForwardPointers& ptr, int64_t block, void* shared,
                           grid::Lanes lanes) {
  if constexpr (std::is_same<E, grid::bf16>::value) {
    if (on_tensor_cores<E>(p)) {
      output_block_mma<E, Acc>(p, ptr, block, shared, lanes);
      return;
    }
  }
  ChunkCoords cc;
  if (!chunk_coords(p, block, cc)) return;
  grid::SharedArena arena(shared);
  const Tiles<Acc> t = carve<Acc>(arena, p, false);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* chunk_states = static_cast<const Acc*>(ptr.chunk_states);
  E* o = static_cast<E*>(ptr.o);
  const BlockCoords& bc = cc.bc;
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, c = p.tiling.sub_chunk;
  const int bv = bc.bv;
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };
  const int64_t row0 = cc.bos + cc.ci * C;
  const int L = static_cast<int>(cc.len - cc.ci * C < C ? cc.len - cc.ci * C : C);
  load_chunk_keys<E, Acc>(p, q, k, gate, row0, h, L, t, lanes);
  MNEMO_FOR_LANES(x, L * bv, lanes) {
    const int i = x / bv, col = x % bv;
    t.v[i * t.vp + col] = grid::load_as<Acc>(v + ((row0 + i) * H + h) * V + v0 + col);
  }
  MNEMO_FOR_LANES(x, K * bv, lanes) {
    const int row = x / bv, col = x % bv;
    t.s[row * t.vp + col] = chunk_states[state_at(cc.slot0 + cc.ci, row, col)];
  }
  grid::barrier();
  gate_cumsum(p, L, t, lanes);
  grid::barrier();
  sub_block_factors(p, L, t, lanes);
  grid::barrier();
  MNEMO_FOR_LANES(x, L * L, lanes) {
    const int i = x / L, j = x % L;
    if (j <= i) t.a[i * C + j] = intra_score(p, t, i, j);
  }
  grid::barrier();
  // O = (Qn ⊙ e^r) S + A V
  MNEMO_FOR_LANES(x, L * bv, lanes) {
    const int i = x / bv, col = x % bv, I = i / c;
    Acc sum = 0;
    for (int r = 0; r < K; ++r) sum += t.qn[i * t.kp + r] * t.er[I * K + r] * t.s[r * t.vp + col];
    for (int j = 0; j <= i; ++j) sum += t.a[i * C + j] * t.v[j * t.vp + col];
    grid::store_as<Acc>(o + ((row0 + i) * H + h) * V + v0 + col, sum);
  }
}

template <class E, class Acc>
MNEMO_HD void state_backward_block(const Problem& p, const BackwardPointers& ptr, int64_t block, void* shared,
                                   grid::Lanes lanes) {
  if constexpr (std::is_same<E, grid::bf16>::value) {
    if (on_tensor_cores<E>(p)) {
      state_backward_block_mma<E, Acc>(p, ptr, block, shared, lanes);
      return;
    }
  }
  grid::SharedArena arena(shared);
  const Tiles<Acc> t = carve<Acc>(arena, p, true);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* d_o = static_cast<const E*>(ptr.d_o);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* d_final = static_cast<const Acc*>(ptr.d_final_state);
  Acc* d_states = static_cast<Acc*>(ptr.d_states);
  Acc* ds0 = static_cast<Acc*>(ptr.ds0);

  const BlockCoords bc = block_coords(p, block);
  int64_t bos, len, slot0;
  sequence_span(p, bc.n, bos, len, slot0);
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, c = p.tiling.sub_chunk;
  const int bv = bc.bv;
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };

  MNEMO_FOR_LANES(x, K * bv, lanes) {
    const int row = x / bv, col = x % bv;
    t.ds[row * t.vp + col] = d_final ? d_final[state_at(bc.n, row, col)] : Acc(0);
  }
  grid::barrier();
  const int64_t N = chunks_of(len, C);
  for (int64_t ci = N - 1; ci >= 0; --ci) {
    const int64_t row0 = bos + ci * C;
    const int L = static_cast<int>(len - ci * C < C ? len - ci * C : C);
    load_chunk_keys<E, Acc>(p, q, k, gate, row0, h, L, t, lanes);
    MNEMO_FOR_LANES(x, L * bv, lanes) {
      const int i = x / bv, col = x % bv;
      t.d_o[i * t.vp + col] = grid::load_as<Acc>(d_o + ((row0 + i) * H + h) * V + v0 + col);
    }
    // dS' of this chunk (the adjoint of its end state) for the gradient stage.
    MNEMO_FOR_LANES(x, K * bv, lanes) {
      const int row = x / bv, col = x % bv;
      d_states[state_at(slot0 + ci + 1, row, col)] = t.ds[row * t.vp + col];
    }
    grid::barrier();
    gate_cumsum(p, L, t, lanes);
    grid::barrier();
    sub_block_factors(p, L, t, lanes);
    grid::barrier();
    // dS <- D dS' + (Qn ⊙ e^r)ᵀ dO
    MNEMO_FOR_LANES(x, K * bv, lanes) {
      const int r = x / bv, col = x % bv;
      Acc sum = t.d[r] * t.ds[r * t.vp + col];
      for (int i = 0; i < L; ++i) sum += t.qn[i * t.kp + r] * t.er[(i / c) * K + r] * t.d_o[i * t.vp + col];
      t.ds[r * t.vp + col] = sum;
    }
    grid::barrier();
  }
  MNEMO_FOR_LANES(x, K * bv, lanes) {
    const int row = x / bv, col = x % bv;
    ds0[state_at(bc.n, row, col)] = t.ds[row * t.vp + col];
  }
}

template <class E, class Acc>
MNEMO_HD void gradient_block(const Problem& p, const BackwardPointers& ptr, int64_t block, void* shared,
                             grid::Lanes lanes) {
  if constexpr (std::is_same<E, grid::bf16>::value) {
    if (on_tensor_cores<E>(p)) {
      gradient_block_mma<E, Acc>(p, ptr, block, shared, lanes);
      return;
    }
  }
  ChunkCoords cc;
  if (!chunk_coords(p, block, cc)) return;
  grid::SharedArena arena(shared);
  const Tiles<Acc> t = carve<Acc>(arena, p, true);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const E* d_o = static_cast<const E*>(ptr.d_o);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* chunk_states = static_cast<const Acc*>(ptr.chunk_states);
  const Acc* d_states = static_cast<const Acc*>(ptr.d_states);
  Acc* dq = static_cast<Acc*>(ptr.dq);
  Acc* dk = static_cast<Acc*>(ptr.dk);
  Acc* dv = static_cast<Acc*>(ptr.dv);
  Acc* dgate = static_cast<Acc*>(ptr.dgate);

  const BlockCoords& bc = cc.bc;
  const int64_t bos = cc.bos, len = cc.len, slot0 = cc.slot0;
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, c = p.tiling.sub_chunk, BV = p.tiling.tile_v;
  const int bv = bc.bv, S = sub_blocks(p), gw = gate_width(p);
  const int64_t tokens = p.cu_seqlens ? p.cu_seqlens[p.sequences] : p.sequences * p.seq_len;
  const int64_t partial = (bc.v0 / BV) * tokens * H;  // this value tile's slice of dq, dk, dgate (in rows)
  const Acc scale = static_cast<Acc>(p.scale);
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };
  auto last_row = [&](int I, int L) { return (I * c + c < L ? I * c + c : L) - 1; };

  const int64_t ci = cc.ci;
  {
    const int64_t row0 = bos + ci * C;
    const int L = static_cast<int>(len - ci * C < C ? len - ci * C : C);
    load_chunk_keys<E, Acc>(p, q, k, gate, row0, h, L, t, lanes);
    MNEMO_FOR_LANES(x, L * bv, lanes) {
      const int i = x / bv, col = x % bv;
      const int64_t at = ((row0 + i) * H + h) * V + v0 + col;
      t.v[i * t.vp + col] = grid::load_as<Acc>(v + at);
      t.d_o[i * t.vp + col] = grid::load_as<Acc>(d_o + at);
    }
    MNEMO_FOR_LANES(x, K * bv, lanes) {
      const int row = x / bv, col = x % bv;
      t.s[row * t.vp + col] = chunk_states[state_at(slot0 + ci, row, col)];
      t.s_end[row * t.vp + col] = chunk_states[state_at(slot0 + ci + 1, row, col)];
      t.ds[row * t.vp + col] = d_states[state_at(slot0 + ci + 1, row, col)];
    }
    grid::barrier();
    gate_cumsum(p, L, t, lanes);
    grid::barrier();
    sub_block_factors(p, L, t, lanes);
    grid::barrier();
    MNEMO_FOR_LANES(x, L * L, lanes) {
      const int i = x / L, j = x % L;
      if (j <= i) {
        t.a[i * C + j] = intra_score(p, t, i, j);
        Acc sum = 0;
        for (int col = 0; col < bv; ++col) sum += t.d_o[i * t.vp + col] * t.v[j * t.vp + col];
        t.da[i * C + j] = sum;
      }
    }
    grid::barrier();
    // dV_j = Σ_{i>=j} A_ij dO_i + (Kn ⊙ e^{B_L − R})_j dS'
    MNEMO_FOR_LANES(x, L * bv, lanes) {
      const int j = x / bv, col = x % bv;
      Acc sum = 0;
      for (int i = j; i < L; ++i) sum += t.a[i * C + j] * t.d_o[i * t.vp + col];
      for (int r = 0; r < K; ++r) sum += t.kn[j * t.kp + r] * t.g[(j / c) * K + r] * t.ds[r * t.vp + col];
      dv[((row0 + j) * H + h) * V + v0 + col] = sum;
    }
    // dQ_ic = e^{B_ic} (dO_i · S_c) + e^{B_ic − r_Ic} Σ_{J<I} M_IJc Σ_{j∈J} dA_ij Kn_jc + diagonal block
    MNEMO_FOR_LANES(x, L * K, lanes) {
      const int i = x / K, col = x % K, I = i / c;
      const Acc Bi = cum_gate(t, gw, i, col);
      Acc inter = 0;
      for (int r = 0; r < bv; ++r) inter += t.d_o[i * t.vp + r] * t.s[col * t.vp + r];
      Acc off = 0;
      for (int J = 0; J < I; ++J) {
        Acc inner = 0;
        for (int j = J * c; j < J * c + c; ++j) inner += t.da[i * C + j] * t.kn[j * t.kp + col];
        off += t.m[(I * S + J) * K + col] * inner;
      }
      Acc diag = 0;
      for (int j = I * c; j <= i; ++j)
        diag += t.da[i * C + j] * t.k[j * t.kp + col] * grid::exp_acc(Bi - cum_gate(t, gw, j, col));
      t.dq[i * t.kp + col] = grid::exp_acc(Bi) * inter + grid::exp_acc(Bi - cum_gate(t, gw, I * c, col)) * off + diag;
    }
    // dK_jc = F_jc (V_j · dS'_c) + e^{R_Jc − B_jc} Σ_{I>J} M_IJc Σ_{i∈I} dA_ij Qn_ic + diagonal block
    MNEMO_FOR_LANES(x, L * K, lanes) {
      const int j = x / K, col = x % K, J = j / c, lJ = last_row(J, L);
      const Acc Bj = cum_gate(t, gw, j, col);
      Acc state = 0;
      for (int r = 0; r < bv; ++r) state += t.v[j * t.vp + r] * t.ds[col * t.vp + r];
      Acc off = 0;
      const int nsub = (L + c - 1) / c;
      for (int I = J + 1; I < nsub; ++I) {
        Acc inner = 0;
        for (int i = I * c; i <= last_row(I, L); ++i) inner += t.da[i * C + j] * t.qn[i * t.kp + col];
        off += t.m[(I * S + J) * K + col] * inner;
      }
      Acc diag = 0;
      for (int i = j; i <= lJ; ++i)
        diag += t.da[i * C + j] * t.q[i * t.kp + col] * grid::exp_acc(cum_gate(t, gw, i, col) - Bj);
      t.dk[j * t.kp + col] = grid::exp_acc(cum_gate(t, gw, L - 1, col) - Bj) * state +
                grid::exp_acc(cum_gate(t, gw, lJ, col) - Bj) * off + diag;
    }
    grid::barrier();
    // Gradients out; dB_ic = Q_ic dQ_ic − K_ic dK_ic (+ Σ_v dS'_cv S'_cv on the last row), kept in kn.
    MNEMO_FOR_LANES(x, L * K, lanes) {
      const int i = x / K, col = x % K;
      const int64_t at = (partial + (row0 + i) * H + h) * K + col;
      const int here = i * t.kp + col;
      dq[at] = scale * t.dq[here];
      dk[at] = t.dk[here];
      if (p.gate != Gate::kNone) {
        Acc db = t.q[here] * t.dq[here] - t.k[here] * t.dk[here];
        if (i == L - 1)
          for (int r = 0; r < bv; ++r) db += t.ds[col * t.vp + r] * t.s_end[col * t.vp + r];
        t.kn[here] = db;
      }
    }
    grid::barrier();
    // dg_r = Σ_{i>=r} dB_i (key-wise per column; scalar: row sums first).
    if (p.gate == Gate::kKeyWise) {
      MNEMO_FOR_LANES(col, K, lanes) {
        Acc run = 0;
        for (int i = L - 1; i >= 0; --i) {
          run += t.kn[i * t.kp + col];
          dgate[(partial + (row0 + i) * H + h) * K + col] = run;
        }
      }
    } else if (p.gate == Gate::kScalar) {
      MNEMO_FOR_LANES(i, L, lanes) {
        Acc sum = 0;
        for (int col = 0; col < K; ++col) sum += t.kn[i * t.kp + col];
        t.row_sum[i] = sum;
      }
    }
    grid::barrier();
    if (p.gate == Gate::kScalar) {
      if (lanes.lane == 0) {
        Acc run = 0;
        for (int i = L - 1; i >= 0; --i) {
          run += t.row_sum[i];
          dgate[partial + (row0 + i) * H + h] = run;
        }
      }
      grid::barrier();
    }
  }
}

}  // namespace mnemo::gla_kernel
