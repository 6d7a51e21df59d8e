// The delta-rule chunk kernels' stages on tensor cores, for bf16 q, k, v (included by chunk_kernel.cuh; the stages
// there dispatch to these when T is bf16). Same grids, equations and buffers (L⁻¹, the chunk-start states h, U', dR,
// the state adjoints dh and the final states in fp32; o in bf16) as the scalar stages, with every matrix product a
// block_mma (runtime/kernels/block_mma.cuh): bf16 operands, fp32 accumulation. As in flash-linear-attention's chunk
// kernels, an fp32 operand (the state S, L⁻¹, R, U', P, dS, dU', dR, the score adjoints) is rounded to bf16 where it
// enters a product (x̃: x rounded), while the state and its adjoint are carried in fp32 from chunk to chunk:
//   prepare  A = stril(diag(β) (K Kᵀ) ⊙ Γ)                        K Kᵀ on tensor cores, the substitution in fp32
//   state    R = diag(β) (V − diag(e^b) (K S̃)),  U' = L̃⁻¹ R̃,  S ← e^{b_c} S + K̃dᵀ Ũ'
//   output   O = diag(e^b) scale (Q S̃) + P̃ Ũ'  with P = scale (Q Kᵀ ⊙ Γ), lower triangle
//   local    D = P̃ᵀ dO
//   state⁻   dU' = D + K̃d dS̃,  dR = L̃⁻ᵀ dŨ',  dS ← e^{b_c} dS + (Q̃ e^b scale)ᵀ dÕ − (β e^b K̃)ᵀ dR̃
//   grads    dP = dÕ Ũ'ᵀ, dA = −dR̃ Ũ'ᵀ, Q̃s K̃ᵀ and K̃ K̃ᵀ (Q̃s = bf16(scale q)); then, a slab of K columns at a time,
//            Y = dÕ S̃ᵀ, Z = dR̃ S̃ᵀ, W = Ũ' dS̃ᵀ,
//            dq = scale (e^b Y + G K̃),  dk = e^{b_c−b} W − β e^b Z + Gᵀ Q̃s + Gsym K̃
//            with G = dP ⊙ Γ (on and below the diagonal) and Gsym = Ga + Gaᵀ, Ga = dA ⊙ β Γ (below it)
// The gradients are those of the function this forward computes, up to the same roundings. Tiles are padded to
// multiples of 16 rows and columns (mma_ld) with zeros, so a partial last chunk, K or a V tile that is not a multiple
// of 16 runs the same products.
#pragma once

namespace mnemo::delta_rule_kernel {

using grid::block_mma;
using grid::Layout;
using grid::mma_ld;

// Rows r0.. (`rows` of them) of a [T, H, width] buffer, columns [col0, col0 + cols), times `factor`, into a
// zero-padded bf16 tile [padded_rows, ld] (runtime/kernels/block_mma.cuh's load_rows_bf16 in this kernel's sizes).
template <class Acc, class T>
MNEMO_HD void load_rows_bf16(const Problem& p, const T* x, int64_t r0, int head, int width, int col0, int cols,
                             int rows, int padded_rows, int ld, bf16* tile, Lanes lanes, Acc factor = Acc(1)) {
  grid::load_rows_bf16<Acc>(x, r0, p.heads, head, width, col0, cols, rows, padded_rows, ld, factor, tile, lanes);
}

// prepare: tiles gates; K̃ [Cp, Kp]; K Kᵀ then A [Cp, Cp] (fp32); X = L⁻¹ [Cp, Cp] (fp32).
template <class Acc>
struct PrepareMmaTiles {
  Gates<Acc> gates;
  bf16* k;
  Acc *a, *x;
  MNEMO_HD PrepareMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    a = s.take_aligned<Acc>(cp * cp, grid::kMmaAlign);
    x = s.take<Acc>(cp * cp);
  }
};

template <class T, class Acc>
MNEMO_HD void prepare_block_mma(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const ChunkPlace at(p, block, false);
  SharedArena arena(shared);
  PrepareMmaTiles<Acc> s(arena, p);
  const int C = p.chunk, c = at.c, Cp = mma_ld(C), Kp = mma_ld(p.key_dim);
  load_gates_raw<Acc>(p, at.head, a.beta, a.g, at.r0, c, s.gates, lanes);
  load_rows_bf16<Acc>(p, a.k, at.r0, at.head, p.key_dim, 0, p.key_dim, c, Cp, Kp, s.k, lanes);
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Kp, s.k, Kp, s.k, Kp, s.a, Cp, false);  // K Kᵀ
  grid::barrier();
  // Phase: A_ij = β_i Γ_ij (K Kᵀ)_ij below the diagonal, in place (each item its own entry).
  MNEMO_FOR_LANES(e, c * c, lanes) {
    const int i = e / c, j = e % c;
    Acc& entry = s.a[i * Cp + j];
    entry = j < i ? s.gates.beta[i] * exp_acc(s.gates.b[i] - s.gates.b[j]) * entry : Acc(0);
  }
  grid::barrier();
  invert_unit_lower<Acc>(s.a, Cp, c, s.x, lanes);
  grid::barrier();
  store_linv<Acc>(s.x, Cp, c, C, linv_at(a.linv, p, at.chunk, at.head), lanes);
}

// state (forward): tiles gates; L̃⁻¹ [Cp, Cp]; K̃ then K̃d [Cp, Kp]; V [Cp, Bp] (bf16, the inputs' own values);
// S̃ [Kp, Bp]; S [Kp, Bp] (fp32, the carried state); K S then U' [Cp, Bp] (fp32); R̃ then Ũ' [Cp, Bp].
template <class Acc>
struct StateMmaTiles {
  Gates<Acc> gates;
  bf16 *l, *k, *v, *sb, *rb;
  Acc *sf, *ru;
  MNEMO_HD StateMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    l = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    v = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    sb = s.take_aligned<bf16>(kp * bp, grid::kMmaAlign);
    rb = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    sf = s.take_aligned<Acc>(kp * bp, grid::kMmaAlign);
    ru = s.take_aligned<Acc>(cp * bp, grid::kMmaAlign);
  }
};

// What a state step (forward or backward) reads from global memory: chunk n's gates (β_i, g_i), L⁻¹ (fp32) and its
// rows of K, Q, V, dO and D, entry e of each tile as the tiles index it, zero outside the chunk's c rows and the
// tile's columns. Args: ForwardArgs or BackwardArgs.
template <class Args, class Acc>
struct StateChunkLoads {
  struct Gate {
    Acc beta, g;
  };
  const Args& a;
  const Place& at;
  int64_t r0;
  int c, Cp, Kp, Bp;
  const Acc* linv;
  MNEMO_HD StateChunkLoads(const Args& args, const Place& place, int64_t n)
      : a(args), at(place), r0(place.row0 + n * args.p.chunk),
        c(static_cast<int>(place.rows - n * args.p.chunk < args.p.chunk ? place.rows - n * args.p.chunk
                                                                          : args.p.chunk)),
        Cp(mma_ld(args.p.chunk)), Kp(mma_ld(args.p.key_dim)), Bp(mma_ld(args.p.bv)),
        linv(linv_at(args.linv, args.p, place.chunk0 + n, place.head)) {}
  MNEMO_HD Gate gate(int i) const {
    const int64_t at_row = (r0 + i) * a.p.heads + at.head;
    return {a.beta ? a.beta[at_row] : Acc(0), a.g ? a.g[at_row] : Acc(0)};
  }
  MNEMO_HD Acc l(int e) const {
    const int i = e / Cp, j = e % Cp;
    return i < c && j < c ? linv[i * a.p.chunk + j] : Acc(0);
  }
  MNEMO_HD Acc k(int e) const { return key_row(a.k, e); }
  MNEMO_HD Acc q(int e) const { return key_row(a.q, e); }
  MNEMO_HD Acc v(int e) const { return value_row(a.v, e); }
  MNEMO_HD Acc dout(int e) const { return value_row(a.dout, e); }
  MNEMO_HD Acc dr(int e) const { return value_row(a.dr, e); }

 private:
  template <class X>
  MNEMO_HD Acc key_row(const X* x, int e) const {
    const int i = e / Kp, d = e % Kp;
    return i < c && d < a.p.key_dim ? load<Acc>(x[row_at(a.p, r0 + i, at.head, a.p.key_dim, d)]) : Acc(0);
  }
  template <class X>
  MNEMO_HD Acc value_row(const X* x, int e) const {
    const int i = e / Bp, col = e % Bp;
    return i < c && col < at.bvn ? load<Acc>(x[row_at(a.p, r0 + i, at.head, a.p.value_dim, at.v0 + col)]) : Acc(0);
  }
};

// The forward state step's global loads, read one chunk ahead (grid::PrefetchedTile): issued for chunk n + 1 as soon
// as chunk n's are in shared memory, written at the top of chunk n + 1's step.
template <class T, class Acc>
class StateOperandsAhead {
 public:
  static constexpr int kPerLane = 16;  // a 64 × 64 tile at 256 threads
  using Loads = StateChunkLoads<ForwardArgs<T, Acc>, Acc>;
  MNEMO_HD void issue(const Loads& x, Lanes lanes) {
    gates_.issue(x.c, lanes, [&](int i) { return x.gate(i); });
    l_.issue(x.Cp * x.Cp, lanes, [&](int e) { return x.l(e); });
    k_.issue(x.Cp * x.Kp, lanes, [&](int e) { return x.k(e); });
    v_.issue(x.Cp * x.Bp, lanes, [&](int e) { return x.v(e); });
  }
  // Gates raw, L̃⁻¹ = bf16(L⁻¹), K̃ = bf16(K) and V into their tiles (one phase).
  MNEMO_HD void write(const Loads& x, StateMmaTiles<Acc>& s, Lanes lanes) const {
    gates_.write(
        x.c, lanes, [&](int i) { return x.gate(i); },
        [&](int i, typename Loads::Gate g) {
          s.gates.beta[i] = g.beta;
          s.gates.graw[i] = g.g;
        });
    l_.write(x.Cp * x.Cp, lanes, [&](int e) { return x.l(e); }, grid::bf16_tile_store<Acc>(s.l));
    k_.write(x.Cp * x.Kp, lanes, [&](int e) { return x.k(e); }, grid::bf16_tile_store<Acc>(s.k));
    v_.write(x.Cp * x.Bp, lanes, [&](int e) { return x.v(e); }, grid::bf16_tile_store<Acc>(s.v));
  }

 private:
  grid::PrefetchedTile<typename Loads::Gate, 1> gates_;
  grid::PrefetchedTile<Acc, kPerLane> l_, k_, v_;
};

template <class T, class Acc>
MNEMO_HD void state_forward_block_mma(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  StateMmaTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, bvn = at.bvn;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.bv);
  const int64_t chunks = (at.rows + C - 1) / C;
  // Phase: S = the starting state (zero in the padding).
  {
    const Acc* init = a.h0 ? state_at(a.h0, p, at.seq, at.head, at.v0) : nullptr;
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.sf[e] = init && d < K && col < bvn ? init[static_cast<int64_t>(d) * V + col] : Acc(0);
    }
  }
  using Loads = typename StateOperandsAhead<T, Acc>::Loads;
  StateOperandsAhead<T, Acc> ahead;
  if (chunks > 0) ahead.issue(Loads(a, at, 0), lanes);
  grid::barrier();
  for (int64_t n = 0; n < chunks; ++n) {
    const Loads loads(a, at, n);
    const int c = loads.c;
    Acc* h = state_at(a.h, p, at.chunk0 + n, at.head, at.v0);
    // Phase: gates, L̃⁻¹, K̃, V (read during the step before), S̃ = bf16(S), and h[chunk] = S.
    ahead.write(loads, s, lanes);
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.sb[e] = grid::float_to_bf16(static_cast<float>(s.sf[e]));
      if (d < K && col < bvn) h[static_cast<int64_t>(d) * V + col] = s.sf[e];
    }
    grid::barrier();
    if (n + 1 < chunks) ahead.issue(Loads(a, at, n + 1), lanes);  // in flight through this step
    prefix_gates<Acc>(c, s.gates, lanes);
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, s.k, Kp, s.sb, Bp, s.ru, Bp, false);  // K S̃
    grid::barrier();
    // Phase: R̃ = bf16(diag(β) (V − diag(e^b) K S)); K̃d_j = bf16(k_j e^{b_c − b_j}) in place of K̃ (K̃ holds the
    // bf16 inputs' own values, so this is bf16 of the same product as from the inputs).
    const Acc bc = s.gates.b[c - 1];
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int i = e / Bp, col = e % Bp;
      const Acc r = i < c && col < bvn
                        ? s.gates.beta[i] * (static_cast<Acc>(grid::bf16_to_float(s.v[e])) - exp_acc(s.gates.b[i]) * s.ru[e])
                        : Acc(0);
      s.rb[e] = grid::float_to_bf16(static_cast<float>(r));
    }
    MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
      const int j = e / Kp, d = e % Kp;
      if (j < c && d < K)
        s.k[e] = grid::float_to_bf16(
            static_cast<float>(exp_acc(bc - s.gates.b[j]) * static_cast<Acc>(grid::bf16_to_float(s.k[e]))));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Cp, s.l, Cp, s.rb, Bp, s.ru, Bp, false);  // U' = L̃⁻¹ R̃
    grid::barrier();
    // Phase: U' kept (fp32) for the output stage and the backward; Ũ'; S ← e^{b_c} S (each entry itself).
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int i = e / Bp, col = e % Bp;
      if (i < c && col < bvn) a.u[row_at(p, loads.r0 + i, at.head, V, at.v0 + col)] = s.ru[e];
      s.rb[e] = grid::float_to_bf16(static_cast<float>(s.ru[e]));
    }
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) { s.sf[e] *= exp_acc(bc); }
    grid::barrier();
    block_mma<Layout::col, Layout::row>(lanes, Kp, Bp, Cp, s.k, Kp, s.rb, Bp, s.sf, Bp, true);  // S += K̃dᵀ Ũ'
    grid::barrier();
  }
  // Phase: the final state.
  Acc* ht = state_at(a.ht, p, at.seq, at.head, at.v0);
  MNEMO_FOR_LANES(e, K * bvn, lanes) {
    const int d = e / bvn, col = e % bvn;
    ht[static_cast<int64_t>(d) * V + col] = s.sf[d * Bp + col];
  }
}

// P̃ = bf16(scale Γ ⊙ Q Kᵀ) on and below the diagonal of the chunk's c rows, zero elsewhere (one phase).
template <class Acc>
MNEMO_HD void causal_scores_bf16(const Problem& p, int c, const Gates<Acc>& gates, const Acc* qk, bf16* pb,
                                 Lanes lanes) {
  const int Cp = mma_ld(p.chunk);
  const Acc scale = static_cast<Acc>(p.scale);
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    const Acc pm = j <= i && i < c ? scale * exp_acc(gates.b[i] - gates.b[j]) * qk[e] : Acc(0);
    pb[e] = grid::float_to_bf16(static_cast<float>(pm));
  }
}

// output: tiles gates; Q̃, K̃ [Cp, Kp]; S̃ [Kp, Bp]; Ũ' [Cp, Bp]; Q Kᵀ [Cp, Cp] (fp32); P̃ [Cp, Cp]; O [Cp, Bp] (fp32).
template <class Acc>
struct OutputMmaTiles {
  Gates<Acc> gates;
  bf16 *q, *k, *sb, *ub, *pb;
  Acc *qk, *o;
  MNEMO_HD OutputMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    q = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    sb = s.take_aligned<bf16>(kp * bp, grid::kMmaAlign);
    ub = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    pb = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    qk = s.take_aligned<Acc>(cp * cp, grid::kMmaAlign);
    o = s.take_aligned<Acc>(cp * bp, grid::kMmaAlign);
  }
};

template <class T, class Acc>
MNEMO_HD void output_block_mma(const ForwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  OutputMmaTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, bvn = at.bvn, c = at.c;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.bv);
  const Acc scale = static_cast<Acc>(p.scale);
  const Acc* S = state_at(a.h, p, at.chunk, at.head, at.v0);
  // Phase: gates; Q̃, K̃, S̃, Ũ'.
  load_gates_raw<Acc>(p, at.head, nullptr, a.g, at.r0, c, s.gates, lanes);
  load_rows_bf16<Acc>(p, a.q, at.r0, at.head, K, 0, K, c, Cp, Kp, s.q, lanes);
  load_rows_bf16<Acc>(p, a.k, at.r0, at.head, K, 0, K, c, Cp, Kp, s.k, lanes);
  load_rows_bf16<Acc>(p, a.u, at.r0, at.head, V, at.v0, bvn, c, Cp, Bp, s.ub, lanes);
  grid::for_lanes_batched(
      Kp * Bp, lanes,
      [&](int e) {
        const int d = e / Bp, col = e % Bp;
        return d < K && col < bvn ? static_cast<float>(S[static_cast<int64_t>(d) * V + col]) : 0.0f;
      },
      [&](int e, float value) { s.sb[e] = grid::float_to_bf16(value); });
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Kp, s.q, Kp, s.k, Kp, s.qk, Cp, false);  // Q Kᵀ
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, s.q, Kp, s.sb, Bp, s.o, Bp, false);  // Q S̃
  grid::barrier();
  // Phase: P̃ = bf16(scale Γ ⊙ Q Kᵀ) on and below the diagonal; O = diag(e^b) scale Q S̃.
  causal_scores_bf16<Acc>(p, c, s.gates, s.qk, s.pb, lanes);
  MNEMO_FOR_LANES(e, c * Bp, lanes) { s.o[e] *= scale * exp_acc(s.gates.b[e / Bp]); }
  grid::barrier();
  block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Cp, s.pb, Cp, s.ub, Bp, s.o, Bp, true);  // O += P̃ Ũ'
  grid::barrier();
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    grid::store_as<Acc>(&a.o[row_at(p, at.r0 + i, at.head, V, at.v0 + col)], s.o[i * Bp + col]);
  }
}

// ---- Backward: the local and state stages ------------------------------------------------------------------------

// local: D = P̃ᵀ dO (the adjoint of the forward's P̃ Ũ' with respect to Ũ'). Tiles gates; Q̃, K̃ [Cp, Kp]; Q Kᵀ
// [Cp, Cp] (fp32); P̃ [Cp, Cp]; dÕ [Cp, Bp]; D [Cp, Bp] (fp32).
template <class Acc>
struct LocalMmaTiles {
  Gates<Acc> gates;
  bf16 *q, *k, *pb, *dob;
  Acc *qk, *d;
  MNEMO_HD LocalMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    q = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    pb = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    dob = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    qk = s.take_aligned<Acc>(cp * cp, grid::kMmaAlign);
    d = s.take_aligned<Acc>(cp * bp, grid::kMmaAlign);
  }
};

template <class T, class Acc>
MNEMO_HD void local_backward_block_mma(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  LocalMmaTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, bvn = at.bvn, c = at.c;
  const int Cp = mma_ld(p.chunk), Kp = mma_ld(K), Bp = mma_ld(p.bv);
  load_gates_raw<Acc>(p, at.head, nullptr, a.g, at.r0, c, s.gates, lanes);
  load_rows_bf16<Acc>(p, a.q, at.r0, at.head, K, 0, K, c, Cp, Kp, s.q, lanes);
  load_rows_bf16<Acc>(p, a.k, at.r0, at.head, K, 0, K, c, Cp, Kp, s.k, lanes);
  load_rows_bf16<Acc>(p, a.dout, at.r0, at.head, V, at.v0, bvn, c, Cp, Bp, s.dob, lanes);
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Kp, s.q, Kp, s.k, Kp, s.qk, Cp, false);  // Q Kᵀ
  grid::barrier();
  causal_scores_bf16<Acc>(p, c, s.gates, s.qk, s.pb, lanes);
  grid::barrier();
  block_mma<Layout::col, Layout::row>(lanes, Cp, Bp, Cp, s.pb, Cp, s.dob, Bp, s.d, Bp, false);  // P̃ᵀ dÕ
  grid::barrier();
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int j = e / bvn, col = e % bvn;
    a.dr[row_at(p, at.r0 + j, at.head, V, at.v0 + col)] = s.d[j * Bp + col];
  }
}

// state (backward): the reverse chunk loop. Tiles gates; L̃⁻¹ [Cp, Cp]; X [2Cp, Kp] (rows < Cp: Q̃ e^b scale; rows
// >= Cp: K̃d, then −β e^b K̃); K [Cp, Kp] (bf16, the inputs' own values); Y [2Cp, Bp] (rows < Cp: dÕ; rows >= Cp:
// dŨ', then dR̃); dS [Kp, Bp] (fp32, carried); dS̃ [Kp, Bp]; dU', then dR [Cp, Bp] (fp32). The dS update is one product over both halves:
//   dS ← e^{b_c} dS + Xᵀ Y = e^{b_c} dS + Σ_i e^{b_i} (scale q_i dO_i − β_i k_i dR_i).
template <class Acc>
struct StateBackwardMmaTiles {
  Gates<Acc> gates;
  bf16 *l, *x, *k, *y, *dsb;
  Acc *dsf, *ru;
  MNEMO_HD StateBackwardMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    l = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    x = s.take_aligned<bf16>(2 * cp * kp, grid::kMmaAlign);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    y = s.take_aligned<bf16>(2 * cp * bp, grid::kMmaAlign);
    dsb = s.take_aligned<bf16>(kp * bp, grid::kMmaAlign);
    dsf = s.take_aligned<Acc>(kp * bp, grid::kMmaAlign);
    ru = s.take_aligned<Acc>(cp * bp, grid::kMmaAlign);
  }
};

template <class T, class Acc>
MNEMO_HD void state_backward_block_mma(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const Place at(p, block);
  SharedArena arena(shared);
  StateBackwardMmaTiles<Acc> s(arena, p);
  const int K = p.key_dim, V = p.value_dim, C = p.chunk, bvn = at.bvn;
  const int Cp = mma_ld(C), Kp = mma_ld(K), Bp = mma_ld(p.bv);
  const int64_t chunks = (at.rows + C - 1) / C;
  const Acc scale = static_cast<Acc>(p.scale);
  bf16* const x_low = s.x + static_cast<std::size_t>(Cp) * Kp;
  bf16* const y_low = s.y + static_cast<std::size_t>(Cp) * Bp;
  // Phase: dS = the incoming adjoint of the final state (zero in the padding).
  {
    const Acc* init = a.dht ? state_at(a.dht, p, at.seq, at.head, at.v0) : nullptr;
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.dsf[e] = init && d < K && col < bvn ? init[static_cast<int64_t>(d) * V + col] : Acc(0);
    }
  }
  grid::barrier();
  // The chunk before's gates, L⁻¹, dO, Q and K are read while this chunk computes (issued once this chunk's are in
  // shared memory), and its D once this chunk has used its own: the chain of chunk steps reads no global memory
  // for what it holds.
  using Loads = StateChunkLoads<BackwardArgs<T, Acc>, Acc>;
  // Held in registers: all of a 64 × 64 tile at 256 threads (16 entries a thread) for the gates, L⁻¹ and dO, half
  // of Q's, K's and D's (the rest are loaded when written, a batch at a time): with more the stage spills
  // (`ptxas -v` at sm_80 and sm_90: 255 registers and no spill as it is; Q, K and D held whole spilled 284 bytes).
  grid::PrefetchedTile<typename Loads::Gate, 1> gates_ahead;
  grid::PrefetchedTile<Acc, 16> l_ahead, dout_ahead;
  grid::PrefetchedTile<Acc, 8> q_ahead, k_ahead, d_ahead;
  auto issue = [&](const Loads& x) {
    gates_ahead.issue(x.c, lanes, [&](int i) { return x.gate(i); });
    l_ahead.issue(Cp * Cp, lanes, [&](int e) { return x.l(e); });
    dout_ahead.issue(Cp * Bp, lanes, [&](int e) { return x.dout(e); });
    q_ahead.issue(Cp * Kp, lanes, [&](int e) { return x.q(e); });
    k_ahead.issue(Cp * Kp, lanes, [&](int e) { return x.k(e); });
  };
  if (chunks > 0) {
    const Loads last(a, at, chunks - 1);
    issue(last);
    d_ahead.issue(Cp * Bp, lanes, [&](int e) { return last.dr(e); });
  }
  for (int64_t n = chunks - 1; n >= 0; --n) {
    const Loads loads(a, at, n);
    const int64_t r0 = loads.r0;
    const int c = loads.c;
    Acc* dh = state_at(a.dh, p, at.chunk0 + n, at.head, at.v0);
    // Phase: gates, L̃⁻¹, dÕ, Q and K as they are (bf16 inputs) in X's halves, dS̃ = bf16(dS), and dh[chunk] = dS.
    gates_ahead.write(
        c, lanes, [&](int i) { return loads.gate(i); },
        [&](int i, typename Loads::Gate g) {
          s.gates.beta[i] = g.beta;
          s.gates.graw[i] = g.g;
        });
    l_ahead.write(Cp * Cp, lanes, [&](int e) { return loads.l(e); }, grid::bf16_tile_store<Acc>(s.l));
    dout_ahead.write(Cp * Bp, lanes, [&](int e) { return loads.dout(e); }, grid::bf16_tile_store<Acc>(s.y));
    q_ahead.write(Cp * Kp, lanes, [&](int e) { return loads.q(e); }, grid::bf16_tile_store<Acc>(s.x));
    k_ahead.write(Cp * Kp, lanes, [&](int e) { return loads.k(e); }, [&](int e, Acc value) {
      x_low[e] = s.k[e] = grid::float_to_bf16(static_cast<float>(value));
    });
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.dsb[e] = grid::float_to_bf16(static_cast<float>(s.dsf[e]));
      if (d < K && col < bvn) dh[static_cast<int64_t>(d) * V + col] = s.dsf[e];
    }
    grid::barrier();
    if (n > 0) issue(Loads(a, at, n - 1));  // in flight through this step
    prefix_gates<Acc>(c, s.gates, lanes);
    grid::barrier();
    // Phase: X's halves Q̃ e^b scale and K̃d (k_j e^{b_c − b_j}), in place (X holds the bf16 inputs' own values, so
    // these are bf16 of the same products as from the inputs).
    const Acc bc = s.gates.b[c - 1];
    MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
      const int i = e / Kp, d = e % Kp;
      Acc qe = 0, kd = 0;
      if (i < c && d < K) {
        qe = scale * exp_acc(s.gates.b[i]) * static_cast<Acc>(grid::bf16_to_float(s.x[e]));
        kd = exp_acc(bc - s.gates.b[i]) * static_cast<Acc>(grid::bf16_to_float(x_low[e]));
      }
      s.x[e] = grid::float_to_bf16(static_cast<float>(qe));
      x_low[e] = grid::float_to_bf16(static_cast<float>(kd));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, x_low, Kp, s.dsb, Bp, s.ru, Bp, false);  // K̃d dS̃
    grid::barrier();
    // Phase: dŨ' = bf16(D + K̃d dS̃), D from the local stage (read during the step before).
    d_ahead.write(Cp * Bp, lanes, [&](int e) { return loads.dr(e); }, [&](int e, Acc d) {
      const int j = e / Bp, col = e % Bp;
      const Acc du = j < c && col < bvn ? d + s.ru[e] : Acc(0);
      y_low[e] = grid::float_to_bf16(static_cast<float>(du));
    });
    if (n > 0) {
      const Loads before(a, at, n - 1);
      d_ahead.issue(Cp * Bp, lanes, [&](int e) { return before.dr(e); });
    }
    grid::barrier();
    block_mma<Layout::col, Layout::row>(lanes, Cp, Bp, Cp, s.l, Cp, y_low, Bp, s.ru, Bp, false);  // dR = L̃⁻ᵀ dŨ'
    grid::barrier();
    // Phase: dR kept (fp32) for the gradient stage; dR̃; X's lower half −β e^b K̃; dS ← e^{b_c} dS.
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int j = e / Bp, col = e % Bp;
      if (j < c && col < bvn) a.dr[row_at(p, r0 + j, at.head, V, at.v0 + col)] = s.ru[e];
      y_low[e] = grid::float_to_bf16(static_cast<float>(s.ru[e]));
    }
    MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
      const int i = e / Kp, d = e % Kp;
      const Acc kb = i < c && d < K ? -s.gates.beta[i] * exp_acc(s.gates.b[i]) * static_cast<Acc>(grid::bf16_to_float(s.k[e]))
                                    : Acc(0);
      x_low[e] = grid::float_to_bf16(static_cast<float>(kb));
    }
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) { s.dsf[e] *= exp_acc(bc); }
    grid::barrier();
    block_mma<Layout::col, Layout::row>(lanes, Kp, Bp, 2 * Cp, s.x, Kp, s.y, Bp, s.dsf, Bp, true);  // += Xᵀ Y
    grid::barrier();
  }
  // Phase: d(initial state).
  Acc* dh0 = state_at(a.dh0, p, at.seq, at.head, at.v0);
  MNEMO_FOR_LANES(e, K * bvn, lanes) {
    const int d = e / bvn, col = e % bvn;
    dh0[static_cast<int64_t>(d) * V + col] = s.dsf[d * Bp + col];
  }
}

// ---- Backward: the gradient stage --------------------------------------------------------------------------------

// K columns per slab of the gradient stage: its [rows, K] products run slab by slab, so its tiles do not grow with K.
constexpr int kGradientSlab = 32;

// gradients: tiles gates; [dÕ; dR̃] [2Cp, Bp]; Ũ' [Cp, Bp]; G = bf16(dP ⊙ Γ) and Gsym = bf16(Ga + Gaᵀ) [Cp, Cp]
// (Ga = dA ⊙ β Γ below the diagonal); slabs of Q̃s = bf16(scale q) and K̃ [Cp, KS] and of S̃ and dS̃ [KS, Bp]; one
// fp32 region holding first (Q̃s K̃ᵀ or K̃ K̃ᵀ, dP or dA) [Cp, Cp] each, then a slab's (Y; Z) [2Cp, KS] and W [Cp, KS];
// per-row sums.
template <class Acc>
struct GradientMmaTiles {
  Gates<Acc> gates;
  bf16 *y2, *ub, *g1, *gsym, *qs, *ks, *sb, *dsb;
  Acc *scores, *adjoints, *yz, *w;
  Acc *drv, *mdiff, *dbkk, *qy, *kz, *kw, *db, *t, *sds;
  MNEMO_HD GradientMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv), ks_w = kGradientSlab;
    y2 = s.take_aligned<bf16>(2 * cp * bp, grid::kMmaAlign);
    ub = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    g1 = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    gsym = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    qs = s.take_aligned<bf16>(cp * ks_w, grid::kMmaAlign);
    ks = s.take_aligned<bf16>(cp * ks_w, grid::kMmaAlign);
    sb = s.take_aligned<bf16>(ks_w * bp, grid::kMmaAlign);
    dsb = s.take_aligned<bf16>(ks_w * bp, grid::kMmaAlign);
    const std::size_t region = 2 * cp * cp > 3 * cp * ks_w ? 2 * cp * cp : 3 * cp * ks_w;
    scores = s.take_aligned<Acc>(region, grid::kMmaAlign);
    adjoints = scores + cp * cp;
    yz = scores;
    w = scores + 2 * cp * ks_w;
    drv = s.take<Acc>(cp);
    mdiff = s.take<Acc>(cp);
    dbkk = s.take<Acc>(cp);
    qy = s.take<Acc>(cp);
    kz = s.take<Acc>(cp);
    kw = s.take<Acc>(cp);
    db = s.take<Acc>(cp);
    t = s.take<Acc>(cp);
    sds = s.take<Acc>(kp);
  }
};

// Columns [k0, k0 + KS) of rows r0.. of a [T, H, K] buffer, times `factor`, into a zero-padded bf16 slab [Cp, KS].
template <class Acc, class T>
MNEMO_HD void load_slab_bf16(const Problem& p, const T* x, int64_t r0, int head, int k0, int c, Acc factor,
                             bf16* slab, Lanes lanes) {
  load_rows_bf16<Acc>(p, x, r0, head, p.key_dim, k0, p.key_dim - k0, c, mma_ld(p.chunk), kGradientSlab, slab, lanes,
                      factor);
}

// Pass over K's slabs accumulating X Kᵀ into `out` [Cp, Cp] (X = Q̃s when with_q, else K̃).
template <class T, class Acc>
MNEMO_HD void slab_scores(const BackwardArgs<T, Acc>& a, const ChunkPlace& at, GradientMmaTiles<Acc>& s, bool with_q,
                          Acc* out, Lanes lanes) {
  const Problem& p = a.p;
  const int Cp = mma_ld(p.chunk), Kp = mma_ld(p.key_dim);
  for (int k0 = 0; k0 < Kp; k0 += kGradientSlab) {
    const int width = Kp - k0 < kGradientSlab ? Kp - k0 : kGradientSlab;
    if (with_q) load_slab_bf16<Acc>(p, a.q, at.r0, at.head, k0, at.c, static_cast<Acc>(p.scale), s.qs, lanes);
    load_slab_bf16<Acc>(p, a.k, at.r0, at.head, k0, at.c, Acc(1), s.ks, lanes);
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, width, with_q ? s.qs : s.ks, kGradientSlab, s.ks,
                                        kGradientSlab, out, Cp, k0 > 0);
    grid::barrier();
  }
}

template <class T, class Acc>
MNEMO_HD void gradient_block_mma(const BackwardArgs<T, Acc>& a, int64_t block, void* shared, Lanes lanes) {
  const Problem& p = a.p;
  const ChunkPlace at(p, block, true);
  SharedArena arena(shared);
  GradientMmaTiles<Acc> s(arena, p);
  const Gates<Acc>& f = s.gates;
  const int K = p.key_dim, V = p.value_dim, H = p.heads, bvn = at.bvn, c = at.c;
  const int Cp = mma_ld(p.chunk), Kp = mma_ld(K), Bp = mma_ld(p.bv), KS = kGradientSlab;
  const int64_t total_rows = p.cu_seqlens[p.num_seqs], r0 = at.r0;
  const Acc scale = static_cast<Acc>(p.scale);
  const Acc* S = state_at(a.h, p, at.chunk, at.head, at.v0);
  const Acc* dS = state_at(a.dh, p, at.chunk, at.head, at.v0);
  Acc* dq = a.dq + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dk = a.dk + static_cast<int64_t>(at.vt) * total_rows * H * K;
  Acc* dbeta = a.dbeta + static_cast<int64_t>(at.vt) * total_rows * H;
  Acc* dg = a.g ? a.dg + static_cast<int64_t>(at.vt) * total_rows * H : nullptr;
  bf16* const dob = s.y2;
  bf16* const drb = s.y2 + static_cast<std::size_t>(Cp) * Bp;
  auto gamma = [&](int i, int j) { return exp_acc(f.b[i] - f.b[j]); };
  // Phase: gates; dÕ, dR̃, Ũ'; dR·v per row; ⟨S, dS⟩ per state row (dg only).
  load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
  load_rows_bf16<Acc>(p, a.dout, r0, at.head, V, at.v0, bvn, c, Cp, Bp, dob, lanes);
  load_rows_bf16<Acc>(p, a.dr, r0, at.head, V, at.v0, bvn, c, Cp, Bp, drb, lanes);
  load_rows_bf16<Acc>(p, a.u, r0, at.head, V, at.v0, bvn, c, Cp, Bp, s.ub, lanes);
  MNEMO_FOR_LANES(i, c, lanes) {
    Acc acc = 0;
    for (int col = 0; col < bvn; ++col) {
      const int64_t at_v = row_at(p, r0 + i, at.head, V, at.v0 + col);
      acc += a.dr[at_v] * load<Acc>(a.v[at_v]);
    }
    s.drv[i] = acc;
    s.qy[i] = s.kz[i] = s.kw[i] = Acc(0);
  }
  if (dg) {
    MNEMO_FOR_LANES(d, K, lanes) {
      Acc acc = 0;
      for (int col = 0; col < bvn; ++col)
        acc += S[static_cast<int64_t>(d) * V + col] * dS[static_cast<int64_t>(d) * V + col];
      s.sds[d] = acc;
    }
  }
  grid::barrier();
  prefix_gates<Acc>(c, s.gates, lanes);
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Bp, dob, Bp, s.ub, Bp, s.adjoints, Cp, false);  // dP = dÕ Ũ'ᵀ
  grid::barrier();
  slab_scores(a, at, s, true, s.scores, lanes);  // Q̃s K̃ᵀ
  // Phase: G = bf16(dP ⊙ Γ) on and below the diagonal; M = dP Γ ⊙ Q̃s K̃ᵀ: row sum minus column sum per index.
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    s.g1[e] = grid::float_to_bf16(j <= i && i < c ? static_cast<float>(s.adjoints[e] * gamma(i, j)) : 0.0f);
  }
  MNEMO_FOR_LANES(i, c, lanes) {
    Acc m = 0;
    for (int j = 0; j <= i; ++j) m += s.adjoints[i * Cp + j] * gamma(i, j) * s.scores[i * Cp + j];
    for (int i2 = i; i2 < c; ++i2) m -= s.adjoints[i2 * Cp + i] * gamma(i2, i) * s.scores[i2 * Cp + i];
    s.mdiff[i] = m;
  }
  grid::barrier();
  block_mma<Layout::row, Layout::col>(lanes, Cp, Cp, Bp, drb, Bp, s.ub, Bp, s.adjoints, Cp, false);  // −dA = dR̃ Ũ'ᵀ
  grid::barrier();
  slab_scores(a, at, s, false, s.scores, lanes);  // K̃ K̃ᵀ
  // Phase: Gsym = bf16(Ga + Gaᵀ) with Ga = dA β Γ below the diagonal; M's K K̃ᵀ part; dβ's Σ_{j<i} dA Γ kk.
  auto ga = [&](int i, int j) { return j < i && i < c ? -s.adjoints[i * Cp + j] * f.beta[i] * gamma(i, j) : Acc(0); };
  MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
    const int i = e / Cp, j = e % Cp;
    s.gsym[e] = grid::float_to_bf16(static_cast<float>(ga(i, j) + ga(j, i)));
  }
  MNEMO_FOR_LANES(i, c, lanes) {
    Acc m = 0, dbk = 0;
    for (int j = 0; j < i; ++j) {
      m += ga(i, j) * s.scores[i * Cp + j];
      dbk -= s.adjoints[i * Cp + j] * gamma(i, j) * s.scores[i * Cp + j];
    }
    for (int i2 = i + 1; i2 < c; ++i2) m -= ga(i2, i) * s.scores[i2 * Cp + i];
    s.mdiff[i] += m;
    s.dbkk[i] = dbk;
  }
  grid::barrier();
  // K's slabs: Y = dÕ S̃ᵀ and Z = dR̃ S̃ᵀ (one product of the stacked rows), W = Ũ' dS̃ᵀ; their row terms; then
  //   dq = scale (e^b ⊙ Y + G K̃),   dk = e^{b_c − b} ⊙ W − β e^b ⊙ Z + Gᵀ Q̃s + Gsym K̃.
  Acc* const y = s.yz;
  Acc* const z = s.yz + static_cast<std::size_t>(Cp) * KS;
  for (int k0 = 0; k0 < Kp; k0 += KS) {
    const int width = Kp - k0 < KS ? Kp - k0 : KS;
    load_slab_bf16<Acc>(p, a.q, r0, at.head, k0, c, scale, s.qs, lanes);
    load_slab_bf16<Acc>(p, a.k, r0, at.head, k0, c, Acc(1), s.ks, lanes);
    MNEMO_FOR_LANES(e, KS * Bp, lanes) {
      const int d = k0 + e / Bp, col = e % Bp;
      const bool in = d < K && col < bvn;
      const int64_t at_s = static_cast<int64_t>(d) * V + col;
      s.sb[e] = grid::float_to_bf16(in ? static_cast<float>(S[at_s]) : 0.0f);
      s.dsb[e] = grid::float_to_bf16(in ? static_cast<float>(dS[at_s]) : 0.0f);
    }
    grid::barrier();
    block_mma<Layout::row, Layout::col>(lanes, 2 * Cp, width, Bp, s.y2, Bp, s.sb, Bp, s.yz, KS, false);
    block_mma<Layout::row, Layout::col>(lanes, Cp, width, Bp, s.ub, Bp, s.dsb, Bp, s.w, KS, false);
    grid::barrier();
    MNEMO_FOR_LANES(i, c, lanes) {
      Acc qy = 0, kz = 0, kw = 0;
      for (int d = 0; d < width; ++d) {
        const Acc qd = grid::bf16_to_float(s.qs[i * KS + d]), kd = grid::bf16_to_float(s.ks[i * KS + d]);
        qy += qd * y[i * KS + d];
        kz += kd * z[i * KS + d];
        kw += kd * s.w[i * KS + d];
      }
      s.qy[i] += qy;
      s.kz[i] += kz;
      s.kw[i] += kw;
    }
    grid::barrier();
    const Acc bc = f.b[c - 1];
    MNEMO_FOR_LANES(e, c * KS, lanes) {
      const int i = e / KS;
      const Acc ebi = exp_acc(f.b[i]);
      y[e] *= ebi;
      s.w[e] = exp_acc(bc - f.b[i]) * s.w[e] - f.beta[i] * ebi * z[e];
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, width, Cp, s.g1, Cp, s.ks, KS, y, KS, true);   // + G K̃
    block_mma<Layout::col, Layout::row>(lanes, Cp, width, Cp, s.g1, Cp, s.qs, KS, s.w, KS, true);  // + Gᵀ Q̃s
    block_mma<Layout::row, Layout::row>(lanes, Cp, width, Cp, s.gsym, Cp, s.ks, KS, s.w, KS, true);  // + Gsym K̃
    grid::barrier();
    MNEMO_FOR_LANES(e, c * KS, lanes) {
      const int i = e / KS, d = k0 + e % KS;
      if (d < K) {
        const int64_t out = row_at(p, r0 + i, at.head, K, d);
        dq[out] = scale * y[e];
        dk[out] = s.w[e];
      }
    }
    grid::barrier();
  }
  // Phase: dv = β dR; dβ; db_i − t_i.
  const Acc bc = f.b[c - 1];
  MNEMO_FOR_LANES(e, c * bvn, lanes) {
    const int i = e / bvn, col = e % bvn;
    const int64_t at_v = row_at(p, r0 + i, at.head, V, at.v0 + col);
    a.dv[at_v] = f.beta[i] * a.dr[at_v];
  }
  MNEMO_FOR_LANES(i, c, lanes) {
    const Acc ebi = exp_acc(f.b[i]);
    dbeta[(r0 + i) * H + at.head] = s.drv[i] - ebi * s.kz[i] + s.dbkk[i];
    s.t[i] = exp_acc(bc - f.b[i]) * s.kw[i];
    s.db[i] = ebi * (s.qy[i] - f.beta[i] * s.kz[i]) + s.mdiff[i] - s.t[i];
  }
  grid::barrier();
  // Phase (one item): the chunk-end terms of db_c, then dg_r = Σ_{i>=r} db_i.
  if (dg) {
    MNEMO_FOR_LANES(one, 1, lanes) {
      (void)one;
      Acc extra = 0, sds = 0;
      for (int j = 0; j < c; ++j) extra += s.t[j];
      for (int d = 0; d < K; ++d) sds += s.sds[d];
      s.db[c - 1] += extra + exp_acc(bc) * sds;
      Acc acc = 0;
      for (int r = c - 1; r >= 0; --r) {
        acc += s.db[r];
        dg[(r0 + r) * H + at.head] = acc;
      }
    }
  }
}

}  // namespace mnemo::delta_rule_kernel
