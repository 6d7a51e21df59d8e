// The gated-linear-attention chunk kernels on tensor cores, for bf16 q, k, v and every gate: a per-head scalar gate
// (simple GLA, RetNet), none (linear attention) or GLA's key-wise gates; included by chunk_kernel.cuh, whose stages
// dispatch to these. With key-wise gates the state stages scale row c of the state by e^{B_Lc} and k, q by their
// column's factors, and the output and gradient stages split the gate at 16-row sub-blocks
// (output_block_mma_key_wise, gradient_block_mma_key_wise). Below, a scalar gate: same grids,
// buffers and equations as the scalar stages (chunk_kernel.cuh's header) with B_i = Σ_{r<=i} g_r one number a row,
// so Γ_ij = e^{B_i − B_j} and every product is a block_mma
// (runtime/kernels/block_mma.cuh: bf16 operands, fp32 sums). As in flash-linear-attention's kernels an fp32 operand
// (the state S, its adjoint dS', the scores A, dA) is rounded to bf16 where it enters a product (x̃), while the state
// and its adjoint are carried in fp32 from chunk to chunk:
//   state    S ← e^{B_L} S + K̃dᵀ Ṽ,  Kd_j = k_j e^{B_L − B_j}                        (chunk after chunk)
//   output   O = scale e^B ⊙ (Q̃ S̃) + Ã Ṽ,  A = scale (Q̃ K̃ᵀ) ⊙ Γ on and below the diagonal
//   state⁻   dS ← e^{B_L} dS' + (Q̃ e^B scale)ᵀ dÕ                                     (chunks in reverse)
//   grads    dA = dÕ Ṽᵀ, G = dA ⊙ Γ (lower), dV = Ãᵀ dÕ + K̃d dS̃'; then, a slab of K columns at a time,
//            dQ = e^B ⊙ (dÕ S̃ᵀ) + G̃ K̃,  dK = e^{B_L − B} ⊙ (Ṽ dS̃'ᵀ) + G̃ᵀ Q̃s  (Q̃s = bf16(scale q)),
//            dB_i = Σ_c (scale q_ic dQ_ic − k_ic dK_ic) + [i = L − 1] ⟨dS', S'⟩,  dg_r = Σ_{i>=r} dB_i,  dq = scale dQ
// Tiles are padded to multiples of 16 rows and columns (mma_ld) with zeros; each row's sums are one lane's.
#pragma once

#include <type_traits>

#include "runtime/kernels/block_mma.cuh"

namespace mnemo::gla_kernel {

using grid::bf16;
using grid::block_mma;
using grid::Layout;
using grid::mma_ld;

// Every stage runs on tensor cores for bf16 elements, with any gate.
template <class E>
MNEMO_HD bool on_tensor_cores(const Problem&) {
  return std::is_same<E, bf16>::value;
}

constexpr int kMmaSlab = 32;  // K columns per slab of the gradient stage

// Tiles of the four stages, carved by one template over a SharedArena (the kernel) or a byte count.
template <class Acc>
struct MmaTiles {
  Acc* b;           // [Cp] B_i; key-wise gates (state stages): [Cp, Kp] B_ic
  Acc* rows;        // [Cp] per-row sums (dB)
  Acc* sds;         // [Kp] ⟨dS', S'⟩ per state row
  bf16 *qa, *ka;    // [Cp, Kp] (state and output stages), [Cp, KS] slabs (gradient stage)
  bf16 *kd;         // [Cp, KS] slab of K̃d (gradient stage)
  bf16 *sb, *dsb;   // [Kp, Bp] (output), [KS, Bp] slabs (gradient)
  bf16 *vb, *dob;   // [Cp, Bp]
  bf16 *ab, *gb;    // [Cp, Cp] Ã, G̃
  Acc *sf;          // [Kp, Bp] the carried state or its adjoint (state stages)
  Acc *scores, *adj;  // [Cp, Cp] Q K̃ᵀ, dA (output: scores only)
  Acc *out;         // [Cp, Bp] O (output), dV (gradient)
  Acc *y, *w;       // [Cp, KS] slabs of dQ and dK (gradient)
  Acc *tq, *tk;     // [16, KS], [Cp, KS] one sub-block row's products (gradient, key-wise gates)
};

enum class MmaStage { state_forward, output, state_backward, gradients };

template <class Acc, class Arena>
MNEMO_HD MmaTiles<Acc> carve_mma(Arena& arena, const Problem& p, MmaStage stage) {
  const std::size_t cp = mma_ld(p.tiling.chunk), kp = mma_ld(static_cast<int>(p.key_dim)),
                    bp = mma_ld(p.tiling.tile_v), ks = kMmaSlab;
  constexpr std::size_t A = grid::kMmaAlign;
  MmaTiles<Acc> t{};
  const bool key_wise = p.gate == Gate::kKeyWise;
  // B: one number a row (scalar gate); key-wise, [Cp, Kp] in the state and output stages, a [Cp, KS] slab in the
  // gradient stage.
  t.b = arena.template take<Acc>(!key_wise ? cp : stage == MmaStage::gradients ? cp * ks : cp * kp);
  t.rows = arena.template take<Acc>(cp);
  switch (stage) {
    case MmaStage::state_forward:
      t.ka = arena.template take_aligned<bf16>(cp * kp, A);
      t.vb = arena.template take_aligned<bf16>(cp * bp, A);
      t.sf = arena.template take_aligned<Acc>(kp * bp, A);
      break;
    case MmaStage::output:
      t.qa = arena.template take_aligned<bf16>(cp * kp, A);
      t.ka = arena.template take_aligned<bf16>(cp * kp, A);
      t.sb = arena.template take_aligned<bf16>(kp * bp, A);
      t.vb = arena.template take_aligned<bf16>(cp * bp, A);
      t.ab = arena.template take_aligned<bf16>(cp * cp, A);
      t.scores = arena.template take_aligned<Acc>(cp * cp, A);
      t.out = arena.template take_aligned<Acc>(cp * bp, A);
      break;
    case MmaStage::state_backward:
      t.qa = arena.template take_aligned<bf16>(cp * kp, A);
      t.dob = arena.template take_aligned<bf16>(cp * bp, A);
      t.sf = arena.template take_aligned<Acc>(kp * bp, A);
      break;
    case MmaStage::gradients:
      t.sds = arena.template take<Acc>(kp);
      t.qa = arena.template take_aligned<bf16>(cp * ks, A);
      t.ka = arena.template take_aligned<bf16>(cp * ks, A);
      t.kd = arena.template take_aligned<bf16>(cp * ks, A);
      t.sb = arena.template take_aligned<bf16>(ks * bp, A);
      t.dsb = arena.template take_aligned<bf16>(ks * bp, A);
      t.vb = arena.template take_aligned<bf16>(cp * bp, A);
      t.dob = arena.template take_aligned<bf16>(cp * bp, A);
      t.ab = arena.template take_aligned<bf16>(cp * cp, A);
      t.gb = arena.template take_aligned<bf16>(cp * cp, A);
      t.out = arena.template take_aligned<Acc>(cp * bp, A);
      if (key_wise) {  // A and dA are summed over the slabs and read by every slab: no sharing of bytes
        t.scores = arena.template take_aligned<Acc>(cp * cp, A);
        t.adj = arena.template take_aligned<Acc>(cp * cp, A);
        t.y = arena.template take_aligned<Acc>(cp * ks, A);
        t.w = arena.template take_aligned<Acc>(cp * ks, A);
        t.tq = arena.template take_aligned<Acc>(grid::kMmaTile * ks, A);
        t.tk = arena.template take_aligned<Acc>(cp * ks, A);
        break;
      }
      // Q K̃ᵀ and dA until Ã and G̃ are made, then the slabs' dQ and dK in the same bytes.
      t.scores = arena.template take_aligned<Acc>(2 * cp * cp > 2 * cp * ks ? 2 * cp * cp : 2 * cp * ks, A);
      t.adj = t.scores + cp * cp;
      t.y = t.scores;
      t.w = t.scores + cp * ks;
      break;
  }
  return t;
}

// Bytes of one tensor-core stage's tiles.
template <class Acc>
std::size_t mma_stage_bytes(const Problem& p, MmaStage stage) {
  grid::SharedArena counter(nullptr);  // counts the bytes of the carve-up
  carve_mma<Acc>(counter, p, stage);
  return counter.used();
}

// B_i = Σ_{r<=i} g_r of the chunk's rows (each row sums its prefix; zero without a gate); key-wise gates: B_ic in
// b [Cp, Kp], each key column summed down by one item. gate_at(b, i, c) reads either.
template <class Acc>
MNEMO_HD void gate_prefix(const Problem& p, const Acc* gate, int64_t row0, int64_t h, int L, Acc* b,
                          grid::Lanes lanes) {
  MNEMO_FOR_LANES(i, L, lanes) {
    Acc acc = 0;
    if (p.gate == Gate::kScalar)
      for (int r = 0; r <= i; ++r) acc += gate[(row0 + r) * p.heads + h];
    b[i] = acc;
  }
}
// B_ic = Σ_{r <= i} g_rc for each key column c from the chunk's raw gates in b: each column summed down in place by
// one item (a phase of its own: the raw gates were written by other lanes).
template <class Acc>
MNEMO_HD void sum_gates_down(const Problem& p, int L, Acc* b, grid::Lanes lanes) {
  const int K = static_cast<int>(p.key_dim), Kp = mma_ld(K);
  MNEMO_FOR_LANES(col, K, lanes) {
    Acc acc = 0;
    for (int i = 0; i < L; ++i) {
      acc += b[i * Kp + col];
      b[i * Kp + col] = acc;
    }
  }
}
// Item e = (i, c) of the raw key-wise gates of rows row0 + i of head h ([T, H, K]), and its place in b ([L, Kp]).
template <class Acc>
MNEMO_HD Acc raw_key_wise_gate(const Problem& p, const Acc* gate, int64_t row0, int64_t h, int e) {
  const int64_t K = p.key_dim;
  return gate[((row0 + e / K) * p.heads + h) * K + e % K];
}
template <class Acc>
MNEMO_HD auto raw_gate_store(const Problem& p, Acc* b) {
  const int K = static_cast<int>(p.key_dim), Kp = mma_ld(K);
  return [b, K, Kp](int e, Acc g) { b[(e / K) * Kp + e % K] = g; };
}
// Key-wise B from global memory, in two phases (a barrier between): the chunk's raw gates into b, their loads a batch
// at a time (grid::for_lanes_batched; consecutive lanes read consecutive columns), then sum_gates_down. Summing down
// straight from global memory waits one memory round trip a row (a load cannot move above the shared-memory store of
// the row before, which may alias it): 64 a chunk.
template <class Acc>
MNEMO_HD void gate_prefix_key_wise(const Problem& p, const Acc* gate, int64_t row0, int64_t h, int L, Acc* b,
                                   grid::Lanes lanes) {
  grid::for_lanes_batched<4>(
      L * static_cast<int>(p.key_dim), lanes, [&](int e) { return raw_key_wise_gate(p, gate, row0, h, e); },
      raw_gate_store(p, b));
  grid::barrier();
  sum_gates_down<Acc>(p, L, b, lanes);
}

// What a state step reads from global memory for chunk `ci` of its sequence: the raw key-wise gates (item e = (i, c)
// of the chunk's L × K), and the rows of a [T, H, K] input (q or k; items of the [Cp, Kp] tile) and of a [T, H, V]
// input (v or dO; items of the [Cp, Bp] tile), zero outside the chunk's rows and the tile's columns.
template <class E, class Acc>
struct GlaChunkLoads {
  const Problem& p;
  const Acc* gate;
  const E* keys;    // q or k
  const E* values;  // v or dO
  int64_t h, v0, row0;
  int L, bv, Cp, Kp, Bp;
  MNEMO_HD GlaChunkLoads(const Problem& problem, const Acc* g, const E* key_rows, const E* value_rows, int64_t head,
                         int64_t col0, int cols, int64_t bos, int64_t len, int64_t ci)
      : p(problem), gate(g), keys(key_rows), values(value_rows), h(head), v0(col0), row0(bos + ci * problem.tiling.chunk),
        L(static_cast<int>(len - ci * problem.tiling.chunk < problem.tiling.chunk ? len - ci * problem.tiling.chunk
                                                                                  : problem.tiling.chunk)),
        bv(cols), Cp(mma_ld(problem.tiling.chunk)), Kp(mma_ld(static_cast<int>(problem.key_dim))),
        Bp(mma_ld(problem.tiling.tile_v)) {}
  MNEMO_HD int gate_items() const { return p.gate == Gate::kKeyWise ? L * static_cast<int>(p.key_dim) : 0; }
  MNEMO_HD Acc raw_gate(int e) const { return raw_key_wise_gate(p, gate, row0, h, e); }
  MNEMO_HD Acc key(int e) const {
    const int i = e / Kp, d = e % Kp;
    return i < L && d < p.key_dim ? grid::load_as<Acc>(keys + ((row0 + i) * p.heads + h) * p.key_dim + d) : Acc(0);
  }
  MNEMO_HD Acc value(int e) const {
    const int i = e / Bp, d = e % Bp;
    return i < L && d < bv ? grid::load_as<Acc>(values + ((row0 + i) * p.heads + h) * p.value_dim + v0 + d) : Acc(0);
  }
};

// A state step's global loads read one chunk ahead (grid::PrefetchedTile, as the delta rule's state stages): the
// key-wise gates and the value-side tile are issued once this chunk's are in shared memory, the key-side tile once
// this chunk has scaled its own.
template <class E, class Acc>
struct GlaOperandsAhead {
  using Loads = GlaChunkLoads<E, Acc>;
  grid::PrefetchedTile<Acc, 16> gates, keys, values;  // all of a 64 × 64 tile at 256 threads
  MNEMO_HD void issue_gates_and_values(const Loads& x, grid::Lanes lanes) {
    gates.issue(x.gate_items(), lanes, [&](int e) { return x.raw_gate(e); });
    values.issue(x.Cp * x.Bp, lanes, [&](int e) { return x.value(e); });
  }
  MNEMO_HD void issue_keys(const Loads& x, grid::Lanes lanes) {
    keys.issue(x.Cp * x.Kp, lanes, [&](int e) { return x.key(e); });
  }
  // The chunk's B: key-wise, the raw gates into b (sum_gates_down after a barrier); scalar, the prefix sums from
  // global memory as gate_prefix. And the value-side tile as bf16 (one phase).
  MNEMO_HD void write_gates_and_values(const Loads& x, Acc* b, bf16* value_tile, grid::Lanes lanes) const {
    if (x.p.gate == Gate::kKeyWise) {
      gates.write(x.gate_items(), lanes, [&](int e) { return x.raw_gate(e); }, raw_gate_store(x.p, b));
    } else {
      gate_prefix<Acc>(x.p, x.gate, x.row0, x.h, x.L, b, lanes);
    }
    values.write(x.Cp * x.Bp, lanes, [&](int e) { return x.value(e); },
                 grid::bf16_tile_store<Acc>(value_tile));
  }
  // The key-side tile as bf16(factor(i, d) · x_id) inside the chunk's rows and columns, zero elsewhere (one phase).
  template <class Factor>
  MNEMO_HD void write_keys(const Loads& x, Factor factor, bf16* key_tile, grid::Lanes lanes) const {
    const int K = static_cast<int>(x.p.key_dim);
    keys.write(x.Cp * x.Kp, lanes, [&](int e) { return x.key(e); }, [&](int e, Acc v) {
      const int i = e / x.Kp, d = e % x.Kp;
      key_tile[e] = grid::float_to_bf16(static_cast<float>(i < x.L && d < K ? factor(i, d) * v : Acc(0)));
    });
  }
};

template <class Acc>
MNEMO_HD Acc gate_at(const Problem& p, const Acc* b, int i, int col) {
  return p.gate == Gate::kKeyWise ? b[i * mma_ld(static_cast<int>(p.key_dim)) + col] : b[i];
}

template <class E, class Acc>
MNEMO_HD void state_forward_block_mma(const Problem& p, const ForwardPointers& ptr, int64_t block, void* shared,
                                      grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::state_forward);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* s0 = static_cast<const Acc*>(ptr.s0);
  Acc* chunk_states = static_cast<Acc*>(ptr.chunk_states);
  const BlockCoords bc = block_coords(p, block);
  int64_t bos, len, slot0;
  sequence_span(p, bc.n, bos, len, slot0);
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };
  MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
    const int row = e / Bp, col = e % Bp;
    t.sf[e] = s0 && row < K && col < bv ? s0[state_at(bc.n, row, col)] : Acc(0);
  }
  grid::barrier();
  const int64_t N = chunks_of(len, C);
  using Loads = GlaChunkLoads<E, Acc>;
  auto loads_of = [&](int64_t ci) { return Loads(p, gate, k, v, h, v0, bv, bos, len, ci); };
  GlaOperandsAhead<E, Acc> ahead;
  if (N > 0) {
    ahead.issue_gates_and_values(loads_of(0), lanes);
    ahead.issue_keys(loads_of(0), lanes);
  }
  for (int64_t ci = 0; ci < N; ++ci) {
    const Loads loads = loads_of(ci);
    const int L = loads.L;
    // Phase: the chunk-start state out; B (key-wise: the raw gates); Ṽ (both read during the step before).
    MNEMO_FOR_LANES(e, K * bv, lanes) {
      const int row = e / bv, col = e % bv;
      chunk_states[state_at(slot0 + ci, row, col)] = t.sf[row * Bp + col];
    }
    ahead.write_gates_and_values(loads, t.b, t.vb, lanes);
    grid::barrier();
    if (ci + 1 < N) ahead.issue_gates_and_values(loads_of(ci + 1), lanes);  // in flight through this step
    if (p.gate == Gate::kKeyWise) {
      sum_gates_down<Acc>(p, L, t.b, lanes);
      grid::barrier();
    }
    // Phase: K̃d = bf16(k_jc e^{B_Lc − B_jc}); S ← e^{B_L} S (row c of the state by e^{B_Lc}).
    ahead.write_keys(loads, [&](int j, int d) {
      return grid::exp_acc(gate_at(p, t.b, L - 1, d) - gate_at(p, t.b, j, d));
    }, t.ka, lanes);
    if (ci + 1 < N) ahead.issue_keys(loads_of(ci + 1), lanes);
    MNEMO_FOR_LANES(e, K * Bp, lanes) { t.sf[e] *= grid::exp_acc(gate_at(p, t.b, L - 1, e / Bp)); }
    grid::barrier();
    block_mma<Layout::col, Layout::row>(lanes, Kp, Bp, Cp, t.ka, Kp, t.vb, Bp, t.sf, Bp, true);  // S += K̃dᵀ Ṽ
    grid::barrier();
  }
  Acc* final_state = static_cast<Acc*>(ptr.final_state);
  MNEMO_FOR_LANES(e, K * bv, lanes) {
    const int row = e / bv, col = e % bv;
    final_state[state_at(bc.n, row, col)] = t.sf[row * Bp + col];
    chunk_states[state_at(slot0 + N, row, col)] = t.sf[row * Bp + col];
  }
}

// output with key-wise gates (B_ic per key column): O = scale ((Q ⊙ e^B) S̃ + Ã Ṽ) with
//   A_ij = Σ_c q_ic k_jc e^{B_ic − B_jc}  (j <= i),
// whose 16 × 16 sub-blocks below the diagonal are products with every exponent <= 0: for rows i of sub-block I
// (first row I0, r_I = B_{I0}) and columns j < I0,
//   A_ij = Σ_c (q_ic e^{B_ic − r_Ic}) (k_jc e^{r_Ic − B_jc})          (tensor cores, one product per sub-block row)
// and the diagonal sub-blocks take e^{B_ic − B_jc} per entry (fp32), as the scalar stage.
template <class E, class Acc>
MNEMO_HD void output_block_mma_key_wise(const Problem& p, const ForwardPointers& ptr, const ChunkCoords& cc,
                                        void* shared, grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::output);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* chunk_states = static_cast<const Acc*>(ptr.chunk_states);
  E* o = static_cast<E*>(ptr.o);
  const BlockCoords& bc = cc.bc;
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv, T16 = grid::kMmaTile;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  const Acc scale = static_cast<Acc>(p.scale);
  const int64_t row0 = cc.bos + cc.ci * C;
  const int L = static_cast<int>(cc.len - cc.ci * C < C ? cc.len - cc.ci * C : C);
  const Acc* S = chunk_states + ((cc.slot0 + cc.ci) * H + h) * K * V + v0;
  auto qk_at = [&](const E* x, int i, int d) { return grid::load_as<Acc>(x + ((row0 + i) * H + h) * K + d); };
  // Phase: B (per key column); Ṽ, S̃.
  gate_prefix_key_wise<Acc>(p, gate, row0, h, L, t.b, lanes);
  grid::load_rows_bf16<Acc>(v, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.vb, lanes);
  MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
    const int row = e / Bp, col = e % Bp;
    t.sb[e] = grid::float_to_bf16(row < K && col < bv ? static_cast<float>(S[row * V + col]) : 0.0f);
  }
  grid::barrier();
  // Phase: Q̃e = bf16(q ⊙ e^B); the diagonal sub-blocks of A (per entry) and zeros above the diagonal.
  MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
    const int i = e / Kp, d = e % Kp;
    const Acc x = i < L && d < K ? qk_at(q, i, d) * grid::exp_acc(t.b[i * Kp + d]) : Acc(0);
    t.qa[e] = grid::float_to_bf16(static_cast<float>(x));
  }
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    if (j < i && i / T16 != j / T16) continue;  // below the diagonal sub-blocks: the products below fill these
    Acc a = 0;
    if (j <= i && i < L)
      for (int d = 0; d < K; ++d)
        a += qk_at(q, i, d) * qk_at(k, j, d) * grid::exp_acc(t.b[i * Kp + d] - t.b[j * Kp + d]);
    t.scores[e] = a;
  }
  grid::barrier();
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, t.qa, Kp, t.sb, Bp, t.out, Bp, false);  // (Q ⊙ e^B) S̃
  grid::barrier();
  // The sub-blocks below the diagonal, one sub-block row I at a time.
  for (int i0 = T16; i0 < L; i0 += T16) {
    // Phase: Q̃n = bf16(q_i e^{B_i − r_I}) for the rows of I; K̃n = bf16(k_j e^{r_I − B_j}) for j < I0.
    MNEMO_FOR_LANES(e, T16 * Kp, lanes) {
      const int i = i0 + e / Kp, d = e % Kp;
      const Acc x = i < L && d < K ? qk_at(q, i, d) * grid::exp_acc(t.b[i * Kp + d] - t.b[i0 * Kp + d]) : Acc(0);
      t.qa[i * Kp + d] = grid::float_to_bf16(static_cast<float>(x));
    }
    MNEMO_FOR_LANES(e, i0 * Kp, lanes) {
      const int j = e / Kp, d = e % Kp;
      const Acc x = d < K ? qk_at(k, j, d) * grid::exp_acc(t.b[i0 * Kp + d] - t.b[j * Kp + d]) : Acc(0);
      t.ka[e] = grid::float_to_bf16(static_cast<float>(x));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, T16, i0, Kp, t.qa + i0 * Kp, Kp, t.ka, Kp, t.scores + i0 * Cp, Cp,
                                        false);
    grid::barrier();
  }
  // Phase: Ã = bf16(scale A) on and below the diagonal; O = scale (Q ⊙ e^B) S̃.
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    t.ab[e] = grid::float_to_bf16(j <= i && i < L ? static_cast<float>(scale * t.scores[e]) : 0.0f);
  }
  MNEMO_FOR_LANES(e, L * Bp, lanes) { t.out[e] *= scale; }
  grid::barrier();
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Cp, t.ab, Cp, t.vb, Bp, t.out, Bp, true);  // O += Ã Ṽ
  grid::barrier();
  MNEMO_FOR_LANES(e, L * bv, lanes) {
    const int i = e / bv, col = e % bv;
    grid::store_as<Acc>(o + ((row0 + i) * H + h) * V + v0 + col, t.out[i * Bp + col]);
  }
}

template <class E, class Acc>
MNEMO_HD void output_block_mma(const Problem& p, const ForwardPointers& ptr, int64_t block, void* shared,
                               grid::Lanes lanes) {
  ChunkCoords cc;
  if (!chunk_coords(p, block, cc)) return;
  if (p.gate == Gate::kKeyWise) {
    output_block_mma_key_wise<E, Acc>(p, ptr, cc, shared, lanes);
    return;
  }
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::output);
  const E* q = static_cast<const E*>(ptr.q);
  const E* k = static_cast<const E*>(ptr.k);
  const E* v = static_cast<const E*>(ptr.v);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* chunk_states = static_cast<const Acc*>(ptr.chunk_states);
  E* o = static_cast<E*>(ptr.o);
  const BlockCoords& bc = cc.bc;
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  const Acc scale = static_cast<Acc>(p.scale);
  const int64_t row0 = cc.bos + cc.ci * C;
  const int L = static_cast<int>(cc.len - cc.ci * C < C ? cc.len - cc.ci * C : C);
  const Acc* S = chunk_states + ((cc.slot0 + cc.ci) * H + h) * K * V + v0;
  // Phase: B; Q̃, K̃, Ṽ, S̃.
  gate_prefix<Acc>(p, gate, row0, h, L, t.b, lanes);
  grid::load_rows_bf16<Acc>(q, row0, H, h, K, 0, K, L, Cp, Kp, Acc(1), t.qa, lanes);
  grid::load_rows_bf16<Acc>(k, row0, H, h, K, 0, K, L, Cp, Kp, Acc(1), t.ka, lanes);
  grid::load_rows_bf16<Acc>(v, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.vb, lanes);
  MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
    const int row = e / Bp, col = e % Bp;
    t.sb[e] = grid::float_to_bf16(row < K && col < bv ? static_cast<float>(S[row * V + col]) : 0.0f);
  }
  grid::barrier();
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Kp, t.qa, Kp, t.ka, Kp, t.scores, Cp, false);  // Q̃ K̃ᵀ
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, t.qa, Kp, t.sb, Bp, t.out, Bp, false);     // Q̃ S̃
  grid::barrier();
  // Phase: Ã = bf16(scale Γ ⊙ Q̃ K̃ᵀ) on and below the diagonal; O = scale e^B ⊙ Q̃ S̃.
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    const Acc a = j <= i && i < L ? scale * grid::exp_acc(t.b[i] - t.b[j]) * t.scores[e] : Acc(0);
    t.ab[e] = grid::float_to_bf16(static_cast<float>(a));
  }
  MNEMO_FOR_LANES(e, L * Bp, lanes) { t.out[e] *= scale * grid::exp_acc(t.b[e / Bp]); }
  grid::barrier();
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Cp, t.ab, Cp, t.vb, Bp, t.out, Bp, true);  // O += Ã Ṽ
  grid::barrier();
  MNEMO_FOR_LANES(e, L * bv, lanes) {
    const int i = e / bv, col = e % bv;
    grid::store_as<Acc>(o + ((row0 + i) * H + h) * V + v0 + col, t.out[i * Bp + col]);
  }
}

template <class E, class Acc>
MNEMO_HD void state_backward_block_mma(const Problem& p, const BackwardPointers& ptr, int64_t block, void* shared,
                                       grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::state_backward);
  const E* q = static_cast<const E*>(ptr.q);
  const E* d_o = static_cast<const E*>(ptr.d_o);
  const Acc* gate = static_cast<const Acc*>(ptr.gate);
  const Acc* d_final = static_cast<const Acc*>(ptr.d_final_state);
  Acc* d_states = static_cast<Acc*>(ptr.d_states);
  const BlockCoords bc = block_coords(p, block);
  int64_t bos, len, slot0;
  sequence_span(p, bc.n, bos, len, slot0);
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  const Acc scale = static_cast<Acc>(p.scale);
  auto state_at = [&](int64_t slot, int row, int col) { return ((slot * H + h) * K + row) * V + v0 + col; };
  MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
    const int row = e / Bp, col = e % Bp;
    t.sf[e] = d_final && row < K && col < bv ? d_final[state_at(bc.n, row, col)] : Acc(0);
  }
  grid::barrier();
  const int64_t N = chunks_of(len, C);
  using Loads = GlaChunkLoads<E, Acc>;
  auto loads_of = [&](int64_t ci) { return Loads(p, gate, q, d_o, h, v0, bv, bos, len, ci); };
  GlaOperandsAhead<E, Acc> ahead;
  if (N > 0) {
    ahead.issue_gates_and_values(loads_of(N - 1), lanes);
    ahead.issue_keys(loads_of(N - 1), lanes);
  }
  for (int64_t ci = N - 1; ci >= 0; --ci) {
    const Loads loads = loads_of(ci);
    const int L = loads.L;
    // Phase: dS' of this chunk out (the adjoint of its end state); B (key-wise: the raw gates); dÕ (both read during
    // the step before).
    MNEMO_FOR_LANES(e, K * bv, lanes) {
      const int row = e / bv, col = e % bv;
      d_states[state_at(slot0 + ci + 1, row, col)] = t.sf[row * Bp + col];
    }
    ahead.write_gates_and_values(loads, t.b, t.dob, lanes);
    grid::barrier();
    if (ci > 0) ahead.issue_gates_and_values(loads_of(ci - 1), lanes);  // in flight through this step
    if (p.gate == Gate::kKeyWise) {
      sum_gates_down<Acc>(p, L, t.b, lanes);
      grid::barrier();
    }
    // Phase: Q̃e = bf16(scale e^{B_ic} q_ic); dS ← e^{B_L} dS' (row c by e^{B_Lc}).
    ahead.write_keys(loads, [&](int i, int d) { return scale * grid::exp_acc(gate_at(p, t.b, i, d)); }, t.qa, lanes);
    if (ci > 0) ahead.issue_keys(loads_of(ci - 1), lanes);
    MNEMO_FOR_LANES(e, K * Bp, lanes) { t.sf[e] *= grid::exp_acc(gate_at(p, t.b, L - 1, e / Bp)); }
    grid::barrier();
    block_mma<Layout::col, Layout::row>(lanes, Kp, Bp, Cp, t.qa, Kp, t.dob, Bp, t.sf, Bp, true);  // += Q̃eᵀ dÕ
    grid::barrier();
  }
  Acc* ds0 = static_cast<Acc*>(ptr.ds0);
  MNEMO_FOR_LANES(e, K * bv, lanes) {
    const int row = e / bv, col = e % bv;
    ds0[state_at(bc.n, row, col)] = t.sf[row * Bp + col];
  }
}

// The gradient stage with GLA's key-wise gates (scalar stage's equations, chunk_kernel.cuh's header), K in slabs of
// KS columns: the gates act per key column, so A, dQ, dK and dB of a slab need only its own columns of q, k, B.
// Rows i of a 16-row sub-block I (first row I0) and columns j < I0 split the gate as the output stage does,
//   e^{B_ic − B_jc} = e^{B_ic − B_I0c} · e^{B_I0c − B_jc}                (both exponents <= 0)
// so with Q̃n = bf16(scale q_i e^{B_i − B_I0}) (rows of I) and K̃n = bf16(k_j e^{B_I0 − B_j}) (j < I0), per slab:
//   A[I, <I0]  += Q̃n K̃nᵀ                        (A holds scale · Σ_c q k e^{B_i − B_j}, all slabs)
//   dQ[I]      += e^{B_i − B_I0} ⊙ (G̃[I, <I0] K̃n)  (G̃ = bf16(dA) below the diagonal sub-blocks)
//   dK[<I0]    += e^{B_I0 − B_j} ⊙ (G̃[I, <I0]ᵀ Q̃n)
// and the diagonal sub-blocks per entry in fp32 from dA, q, k. The state terms are products as with a scalar gate:
// dQ = e^B ⊙ (dÕ S̃ᵀ), dK = e^{B_L − B} ⊙ (Ṽ dS̃'ᵀ), dV = K̃F dS̃' (summed over the slabs) + Ãᵀ dÕ (after them).
template <class E, class Acc>
MNEMO_HD void gradient_block_mma_key_wise(const Problem& p, const BackwardPointers& ptr, const ChunkCoords& cc,
                                          void* shared, grid::Lanes lanes) {
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::gradients);
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
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv, KS = kMmaSlab, T16 = grid::kMmaTile;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  const int64_t tokens = p.cu_seqlens ? p.cu_seqlens[p.sequences] : p.sequences * p.seq_len;
  const int64_t partial = (bc.v0 / p.tiling.tile_v) * tokens * H;  // this value tile's slice of dq, dk, dgate
  const Acc scale = static_cast<Acc>(p.scale);
  const int64_t row0 = cc.bos + cc.ci * C;
  const int L = static_cast<int>(cc.len - cc.ci * C < C ? cc.len - cc.ci * C : C);
  const int64_t state_row = H * K * V;
  const Acc* S = chunk_states + (cc.slot0 + cc.ci) * state_row + h * K * V + v0;
  const Acc* S_end = S + state_row;
  const Acc* dS = d_states + (cc.slot0 + cc.ci + 1) * state_row + h * K * V + v0;
  auto at = [&](int i, int d) { return ((row0 + i) * H + h) * K + d; };  // row i, key column d of q, k, gate
  // Phase: dÕ, Ṽ; A zeroed; ⟨dS'_c, S'_c⟩ per key column (the chunk-end term of dB on the last row).
  grid::load_rows_bf16<Acc>(d_o, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.dob, lanes);
  grid::load_rows_bf16<Acc>(v, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.vb, lanes);
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) { t.scores[e] = Acc(0); }
  MNEMO_FOR_LANES(d, K, lanes) {
    Acc acc = 0;
    for (int col = 0; col < bv; ++col) acc += dS[d * V + col] * S_end[d * V + col];
    t.sds[d] = acc;
  }
  grid::barrier();
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Bp, t.dob, Bp, t.vb, Bp, t.adj, Cp, false);  // dA = dÕ Ṽᵀ
  grid::barrier();
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    t.gb[e] = grid::float_to_bf16(j <= i && i < L ? static_cast<float>(t.adj[e]) : 0.0f);
  }
  for (int k0 = 0; k0 < Kp; k0 += KS) {
    const int width = Kp - k0 < KS ? Kp - k0 : KS, cols = K - k0 < KS ? K - k0 : KS;  // padded, real columns
    // Phase: the slab's B (each column summed down by one item), S̃ and dS̃' rows.
    MNEMO_FOR_LANES(d, cols, lanes) {
      Acc acc = 0;
      for (int i = 0; i < L; ++i) {
        acc += gate[at(i, k0 + d)];
        t.b[i * KS + d] = acc;
      }
    }
    MNEMO_FOR_LANES(e, KS * Bp, lanes) {
      const int d = k0 + e / Bp, col = e % Bp;
      const bool in = d < K && col < bv;
      t.sb[e] = grid::float_to_bf16(in ? static_cast<float>(S[d * V + col]) : 0.0f);
      t.dsb[e] = grid::float_to_bf16(in ? static_cast<float>(dS[d * V + col]) : 0.0f);
    }
    grid::barrier();
    // Phase: K̃F = bf16(k_j e^{B_L − B_j}).
    MNEMO_FOR_LANES(e, Cp * KS, lanes) {
      const int j = e / KS, d = e % KS;
      const Acc kf =
          j < L && d < cols
              ? grid::load_as<Acc>(k + at(j, k0 + d)) * grid::exp_acc(t.b[(L - 1) * KS + d] - t.b[j * KS + d])
              : Acc(0);
      t.kd[e] = grid::float_to_bf16(static_cast<float>(kf));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, Cp, width, Bp, t.dob, Bp, t.sb, Bp, t.y, KS, false);  // dÕ S̃ᵀ
    block_mma<Layout::row, Layout::col>(lanes, Cp, width, Bp, t.vb, Bp, t.dsb, Bp, t.w, KS, false);  // Ṽ dS̃'ᵀ
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, width, t.kd, KS, t.dsb, Bp, t.out, Bp, k0 > 0);  // K̃F dS̃'
    grid::barrier();
    // Phase: the state terms' gates and the diagonal sub-blocks per entry: dQ, dK and A.
    MNEMO_FOR_LANES(e, L * KS, lanes) {
      const int i = e / KS, d = e % KS;
      if (d >= cols) continue;
      const int first = i / T16 * T16, last = (first + T16 < L ? first + T16 : L) - 1;
      const Acc bi = t.b[i * KS + d];
      Acc y = grid::exp_acc(bi) * t.y[e], w = grid::exp_acc(t.b[(L - 1) * KS + d] - bi) * t.w[e];
      for (int j = first; j <= i; ++j)
        y += t.adj[i * Cp + j] * grid::load_as<Acc>(k + at(j, k0 + d)) * grid::exp_acc(bi - t.b[j * KS + d]);
      for (int r = i; r <= last; ++r)  // row i as the key row: Σ_{r>=i} dA_ri scale q_r e^{B_r − B_i}
        w += t.adj[r * Cp + i] * scale * grid::load_as<Acc>(q + at(r, k0 + d)) * grid::exp_acc(t.b[r * KS + d] - bi);
      t.y[e] = y;
      t.w[e] = w;
    }
    MNEMO_FOR_LANES(e, L * T16, lanes) {
      const int i = e / T16, j = i / T16 * T16 + e % T16;
      if (j > i) continue;
      Acc a = 0;
      for (int d = 0; d < cols; ++d)
        a += grid::load_as<Acc>(q + at(i, k0 + d)) * grid::load_as<Acc>(k + at(j, k0 + d)) *
             grid::exp_acc(t.b[i * KS + d] - t.b[j * KS + d]);
      t.scores[i * Cp + j] += scale * a;
    }
    grid::barrier();
    // The sub-blocks below the diagonal, one sub-block row I at a time.
    for (int i0 = T16; i0 < L; i0 += T16) {
      // Phase: Q̃n rows of I, K̃n rows j < I0.
      MNEMO_FOR_LANES(e, T16 * KS, lanes) {
        const int i = i0 + e / KS, d = e % KS;
        const Acc x = i < L && d < cols ? scale * grid::load_as<Acc>(q + at(i, k0 + d)) *
                                              grid::exp_acc(t.b[i * KS + d] - t.b[i0 * KS + d])
                                        : Acc(0);
        t.qa[e] = grid::float_to_bf16(static_cast<float>(x));
      }
      MNEMO_FOR_LANES(e, i0 * KS, lanes) {
        const int j = e / KS, d = e % KS;
        const Acc x =
            d < cols ? grid::load_as<Acc>(k + at(j, k0 + d)) * grid::exp_acc(t.b[i0 * KS + d] - t.b[j * KS + d])
                     : Acc(0);
        t.ka[e] = grid::float_to_bf16(static_cast<float>(x));
      }
      grid::barrier();
      block_mma<Layout::row, Layout::col>(lanes, T16, i0, width, t.qa, KS, t.ka, KS, t.scores + i0 * Cp, Cp, true);
      block_mma<Layout::row, Layout::row>(lanes, T16, width, i0, t.gb + i0 * Cp, Cp, t.ka, KS, t.tq, KS, false);
      block_mma<Layout::col, Layout::row>(lanes, i0, width, T16, t.gb + i0 * Cp, Cp, t.qa, KS, t.tk, KS, false);
      grid::barrier();
      // Phase: the products into dQ (rows of I) and dK (rows j < I0) with their gate factors.
      MNEMO_FOR_LANES(e, T16 * KS, lanes) {
        const int i = i0 + e / KS, d = e % KS;
        if (i < L && d < cols) t.y[i * KS + d] += grid::exp_acc(t.b[i * KS + d] - t.b[i0 * KS + d]) * t.tq[e];
      }
      MNEMO_FOR_LANES(e, i0 * KS, lanes) {
        const int j = e / KS, d = e % KS;
        if (d < cols) t.w[e] += grid::exp_acc(t.b[i0 * KS + d] - t.b[j * KS + d]) * t.tk[e];
      }
      grid::barrier();
    }
    // Phase: dq, dk out; dg_rc = Σ_{i>=r} dB_ic, dB_ic = scale q_ic dQ_ic − k_ic dK_ic (+ ⟨dS'_c, S'_c⟩ on the
    // last row), one item a column.
    MNEMO_FOR_LANES(e, L * KS, lanes) {
      const int i = e / KS, d = e % KS;
      if (d < cols) {
        dq[(partial * K) + at(i, k0 + d)] = scale * t.y[e];
        dk[(partial * K) + at(i, k0 + d)] = t.w[e];
      }
    }
    MNEMO_FOR_LANES(d, cols, lanes) {
      Acc run = t.sds[k0 + d];
      for (int i = L - 1; i >= 0; --i) {
        run += scale * grid::load_as<Acc>(q + at(i, k0 + d)) * t.y[i * KS + d] -
               grid::load_as<Acc>(k + at(i, k0 + d)) * t.w[i * KS + d];
        dgate[(partial * K) + at(i, k0 + d)] = run;
      }
    }
    grid::barrier();
  }
  // Phase: Ã = bf16(A) on and below the diagonal; then dV = K̃F dS̃' + Ãᵀ dÕ out.
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    t.ab[e] = grid::float_to_bf16(j <= i && i < L ? static_cast<float>(t.scores[e]) : 0.0f);
  }
  grid::barrier();
  block_mma<Layout::col, Layout::row>(lanes, Cp, Bp, Cp, t.ab, Cp, t.dob, Bp, t.out, Bp, true);
  grid::barrier();
  MNEMO_FOR_LANES(e, L * bv, lanes) {
    const int j = e / bv, col = e % bv;
    dv[((row0 + j) * H + h) * V + v0 + col] = t.out[j * Bp + col];
  }
}

template <class E, class Acc>
MNEMO_HD void gradient_block_mma(const Problem& p, const BackwardPointers& ptr, int64_t block, void* shared,
                                 grid::Lanes lanes) {
  ChunkCoords cc;
  if (!chunk_coords(p, block, cc)) return;
  if (p.gate == Gate::kKeyWise) {
    gradient_block_mma_key_wise<E, Acc>(p, ptr, cc, shared, lanes);
    return;
  }
  grid::SharedArena arena(shared);
  const MmaTiles<Acc> t = carve_mma<Acc>(arena, p, MmaStage::gradients);
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
  const int64_t H = p.heads, V = p.value_dim, h = bc.h, v0 = bc.v0;
  const int K = static_cast<int>(p.key_dim), C = p.tiling.chunk, bv = bc.bv, KS = kMmaSlab;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.tiling.tile_v);
  const int64_t tokens = p.cu_seqlens ? p.cu_seqlens[p.sequences] : p.sequences * p.seq_len;
  const int64_t partial = (bc.v0 / p.tiling.tile_v) * tokens * H;  // this value tile's slice of dq, dk, dgate
  const Acc scale = static_cast<Acc>(p.scale);
  const int64_t row0 = cc.bos + cc.ci * C;
  const int L = static_cast<int>(cc.len - cc.ci * C < C ? cc.len - cc.ci * C : C);
  const int64_t state_row = H * K * V;
  const Acc* S = chunk_states + (cc.slot0 + cc.ci) * state_row + h * K * V + v0;
  const Acc* S_end = S + state_row;
  const Acc* dS = d_states + (cc.slot0 + cc.ci + 1) * state_row + h * K * V + v0;
  const bool gated = p.gate == Gate::kScalar;
  // Phase: B; dÕ, Ṽ; zeroed row sums; ⟨dS', S'⟩ per state row (a scalar gate only).
  gate_prefix<Acc>(p, gate, row0, h, L, t.b, lanes);
  grid::load_rows_bf16<Acc>(d_o, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.dob, lanes);
  grid::load_rows_bf16<Acc>(v, row0, H, h, V, v0, bv, L, Cp, Bp, Acc(1), t.vb, lanes);
  MNEMO_FOR_LANES(i, Cp, lanes) { t.rows[i] = Acc(0); }
  if (gated) {
    MNEMO_FOR_LANES(d, K, lanes) {
      Acc acc = 0;
      for (int col = 0; col < bv; ++col) acc += dS[d * V + col] * S_end[d * V + col];
      t.sds[d] = acc;
    }
  }
  grid::barrier();
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Bp, t.dob, Bp, t.vb, Bp, t.adj, Cp, false);  // dA = dÕ Ṽᵀ
  // Q̃ K̃ᵀ over K's slabs (the first slab's loads share this phase).
  for (int k0 = 0; k0 < Kp; k0 += KS) {
    const int width = Kp - k0 < KS ? Kp - k0 : KS;
    grid::load_rows_bf16<Acc>(q, row0, H, h, K, k0, K - k0, L, Cp, KS, Acc(1), t.qa, lanes);
    grid::load_rows_bf16<Acc>(k, row0, H, h, K, k0, K - k0, L, Cp, KS, Acc(1), t.ka, lanes);
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, width, t.qa, KS, t.ka, KS, t.scores, Cp, k0 > 0);
    grid::barrier();
  }
  // Phase: Ã = bf16(scale Γ ⊙ Q̃ K̃ᵀ) and G̃ = bf16(Γ ⊙ dA), on and below the diagonal.
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    const bool in = j <= i && i < L;
    const Acc gamma = in ? grid::exp_acc(t.b[i] - t.b[j]) : Acc(0);
    t.ab[e] = grid::float_to_bf16(static_cast<float>(scale * gamma * t.scores[e]));
    t.gb[e] = grid::float_to_bf16(static_cast<float>(gamma * t.adj[e]));
  }
  grid::barrier();
  block_mma<Layout::col, Layout::row>(lanes, Cp, Bp, Cp, t.ab, Cp, t.dob, Bp, t.out, Bp, false);  // dV = Ãᵀ dÕ
  grid::barrier();
  const Acc bl = t.b[L - 1];
  for (int k0 = 0; k0 < Kp; k0 += KS) {
    const int width = Kp - k0 < KS ? Kp - k0 : KS;
    // Phase: the slab's Q̃s, K̃, K̃d (k_j e^{B_L − B_j}), S̃ and dS̃' rows.
    grid::load_rows_bf16<Acc>(q, row0, H, h, K, k0, K - k0, L, Cp, KS, scale, t.qa, lanes);
    grid::load_rows_bf16<Acc>(k, row0, H, h, K, k0, K - k0, L, Cp, KS, Acc(1), t.ka, lanes);
    MNEMO_FOR_LANES(e, Cp * KS, lanes) {
      const int j = e / KS, d = k0 + e % KS;
      const Acc kd = j < L && d < K ? grid::exp_acc(bl - t.b[j]) * grid::load_as<Acc>(k + ((row0 + j) * H + h) * K + d)
                                    : Acc(0);
      t.kd[e] = grid::float_to_bf16(static_cast<float>(kd));
    }
    MNEMO_FOR_LANES(e, KS * Bp, lanes) {
      const int d = k0 + e / Bp, col = e % Bp;
      const bool in = d < K && col < bv;
      t.sb[e] = grid::float_to_bf16(in ? static_cast<float>(S[d * V + col]) : 0.0f);
      t.dsb[e] = grid::float_to_bf16(in ? static_cast<float>(dS[d * V + col]) : 0.0f);
    }
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, Cp, width, Bp, t.dob, Bp, t.sb, Bp, t.y, KS, false);  // dÕ S̃ᵀ
    block_mma<Layout::row, Layout::col>(lanes, Cp, width, Bp, t.vb, Bp, t.dsb, Bp, t.w, KS, false);  // Ṽ dS̃'ᵀ
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, width, t.kd, KS, t.dsb, Bp, t.out, Bp, true);  // + K̃d dS̃'
    grid::barrier();
    MNEMO_FOR_LANES(e, L * KS, lanes) {
      const int i = e / KS;
      t.y[e] *= grid::exp_acc(t.b[i]);
      t.w[e] *= grid::exp_acc(bl - t.b[i]);
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, width, Cp, t.gb, Cp, t.ka, KS, t.y, KS, true);  // + G̃ K̃
    block_mma<Layout::col, Layout::row>(lanes, Cp, width, Cp, t.gb, Cp, t.qa, KS, t.w, KS, true);  // + G̃ᵀ Q̃s
    grid::barrier();
    // Phase: dq, dk out; dB_i's share Σ_c (Q̃s_ic dQ_ic − K̃_ic dK_ic).
    MNEMO_FOR_LANES(e, L * KS, lanes) {
      const int i = e / KS, d = k0 + e % KS;
      if (d < K) {
        const int64_t at = (partial + (row0 + i) * H + h) * K + d;
        dq[at] = scale * t.y[e];
        dk[at] = t.w[e];
      }
    }
    if (gated) {
      MNEMO_FOR_LANES(i, L, lanes) {
        Acc acc = 0;
        for (int d = 0; d < width; ++d)
          acc += grid::bf16_to_float(t.qa[i * KS + d]) * t.y[i * KS + d] -
                 grid::bf16_to_float(t.ka[i * KS + d]) * t.w[i * KS + d];
        t.rows[i] += acc;
      }
    }
    grid::barrier();
  }
  // Phase: dV out; dg_r = Σ_{i>=r} dB_i with the chunk-end term on the last row (one item).
  MNEMO_FOR_LANES(e, L * bv, lanes) {
    const int j = e / bv, col = e % bv;
    dv[((row0 + j) * H + h) * V + v0 + col] = t.out[j * Bp + col];
  }
  if (gated) {
    MNEMO_FOR_LANES(one, 1, lanes) {
      (void)one;
      Acc end = 0;
      for (int d = 0; d < K; ++d) end += t.sds[d];
      Acc run = end;
      for (int i = L - 1; i >= 0; --i) {
        run += t.rows[i];
        dgate[partial + (row0 + i) * H + h] = run;
      }
    }
  }
}

}  // namespace mnemo::gla_kernel
