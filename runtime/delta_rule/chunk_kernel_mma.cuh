// The delta-rule chunk kernels' forward stages and the backward's local and state stages on tensor cores, for bf16
// q, k, v (included by chunk_kernel.cuh; the stages there dispatch to these when T is bf16). Same grids, equations
// and buffers (L⁻¹, the chunk-start states h, U', dR, the state adjoints dh and the final states in fp32; o in bf16)
// as the scalar stages, with every matrix product a block_mma (runtime/kernels/block_mma.cuh): bf16 operands, fp32
// accumulation. As in flash-linear-attention's chunk kernels, an fp32 operand (the state S, L⁻¹, R, U', P, dS, dU',
// dR) is rounded to bf16 where it enters a product (x̃: x rounded), while the state and its adjoint are carried in
// fp32 from chunk to chunk:
//   prepare  A = stril(diag(β) (K Kᵀ) ⊙ Γ)                        K Kᵀ on tensor cores, the substitution in fp32
//   state    R = diag(β) (V − diag(e^b) (K S̃)),  U' = L̃⁻¹ R̃,  S ← e^{b_c} S + K̃dᵀ Ũ'
//   output   O = diag(e^b) scale (Q S̃) + P̃ Ũ'  with P = scale (Q Kᵀ ⊙ Γ), lower triangle
//   local    D = P̃ᵀ dO
//   state⁻   dU' = D + K̃d dS̃,  dR = L̃⁻ᵀ dŨ',  dS ← e^{b_c} dS + (Q̃ e^b scale)ᵀ dÕ − (β e^b K̃)ᵀ dR̃
// The gradient stage stays scalar (chunk_kernel.cuh), reading h, U', dR and dh from these; the gradients are those of
// the function this forward computes, up to the same roundings. Tiles are padded to multiples of 16 rows and columns
// (mma_ld) with zeros, so a partial last chunk, K or a V tile that is not a multiple of 16 runs the same products.
#pragma once

namespace mnemo::delta_rule_kernel {

using grid::block_mma;
using grid::Layout;
using grid::mma_ld;

// Row `i` < rows, entry `d` < width of a [T, H, width] buffer into a zero-padded bf16 tile [.., ld]; entries past
// the data are zeros. One phase over every entry of the padded tile.
template <class Acc, class T>
MNEMO_HD void load_rows_bf16(const Problem& p, const T* x, int64_t r0, int head, int width, int col0, int cols,
                             int rows, int padded_rows, int ld, bf16* tile, Lanes lanes) {
  MNEMO_FOR_LANES(e, padded_rows * ld, lanes) {
    const int i = e / ld, d = e % ld;
    tile[e] = i < rows && d < cols ? grid::float_to_bf16(static_cast<float>(load<Acc>(x[row_at(p, r0 + i, head, width,
                                                                                                 col0 + d)])))
                                   : grid::float_to_bf16(0.0f);
  }
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
  // Phase: column `col` of X = L⁻¹ by forward substitution, as the scalar stage.
  MNEMO_FOR_LANES(col, c, lanes) {
    for (int i = 0; i < c; ++i) {
      Acc acc = i == col ? Acc(1) : Acc(0);
      if (i > col)
        for (int j = col; j < i; ++j) acc -= s.a[i * Cp + j] * s.x[j * Cp + col];
      s.x[i * Cp + col] = acc;
    }
  }
  grid::barrier();
  Acc* out = linv_at(a.linv, p, at.chunk, at.head);
  MNEMO_FOR_LANES(e, c * c, lanes) { out[(e / c) * C + e % c] = s.x[(e / c) * Cp + e % c]; }
}

// state (forward): tiles gates; L̃⁻¹ [Cp, Cp]; K̃ then K̃d [Cp, Kp]; S̃ [Kp, Bp]; S [Kp, Bp] (fp32, the carried
// state); K S then U' [Cp, Bp] (fp32); R̃ then Ũ' [Cp, Bp].
template <class Acc>
struct StateMmaTiles {
  Gates<Acc> gates;
  bf16 *l, *k, *sb, *rb;
  Acc *sf, *ru;
  MNEMO_HD StateMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    l = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    k = s.take_aligned<bf16>(cp * kp, grid::kMmaAlign);
    sb = s.take_aligned<bf16>(kp * bp, grid::kMmaAlign);
    rb = s.take_aligned<bf16>(cp * bp, grid::kMmaAlign);
    sf = s.take_aligned<Acc>(kp * bp, grid::kMmaAlign);
    ru = s.take_aligned<Acc>(cp * bp, grid::kMmaAlign);
  }
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
  grid::barrier();
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t r0 = at.row0 + n * C;
    const int c = static_cast<int>(at.rows - n * C < C ? at.rows - n * C : C);
    Acc* h = state_at(a.h, p, at.chunk0 + n, at.head, at.v0);
    const Acc* linv = linv_at(a.linv, p, at.chunk0 + n, at.head);
    // Phase: gates, L̃⁻¹, K̃, S̃ = bf16(S), and h[chunk] = S.
    load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
    MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
      const int i = e / Cp, j = e % Cp;
      s.l[e] = grid::float_to_bf16(i < c && j < c ? static_cast<float>(linv[i * C + j]) : 0.0f);
    }
    load_rows_bf16<Acc>(p, a.k, r0, at.head, K, 0, K, c, Cp, Kp, s.k, lanes);
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.sb[e] = grid::float_to_bf16(static_cast<float>(s.sf[e]));
      if (d < K && col < bvn) h[static_cast<int64_t>(d) * V + col] = s.sf[e];
    }
    grid::barrier();
    prefix_gates<Acc>(c, s.gates, lanes);
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, s.k, Kp, s.sb, Bp, s.ru, Bp, false);  // K S̃
    grid::barrier();
    // Phase: R̃ = bf16(diag(β) (V − diag(e^b) K S)); K̃d_j = bf16(k_j e^{b_c − b_j}) from the inputs.
    const Acc bc = s.gates.b[c - 1];
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int i = e / Bp, col = e % Bp;
      Acc r = 0;
      if (i < c && col < bvn)
        r = s.gates.beta[i] *
            (load<Acc>(a.v[row_at(p, r0 + i, at.head, V, at.v0 + col)]) - exp_acc(s.gates.b[i]) * s.ru[e]);
      s.rb[e] = grid::float_to_bf16(static_cast<float>(r));
    }
    MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
      const int j = e / Kp, d = e % Kp;
      const Acc kd = j < c && d < K ? load<Acc>(a.k[row_at(p, r0 + j, at.head, K, d)]) * exp_acc(bc - s.gates.b[j])
                                    : Acc(0);
      s.k[e] = grid::float_to_bf16(static_cast<float>(kd));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Cp, s.l, Cp, s.rb, Bp, s.ru, Bp, false);  // U' = L̃⁻¹ R̃
    grid::barrier();
    // Phase: U' kept (fp32) for the output stage and the backward; Ũ'; S ← e^{b_c} S (each entry itself).
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int i = e / Bp, col = e % Bp;
      if (i < c && col < bvn) a.u[row_at(p, r0 + i, at.head, V, at.v0 + col)] = s.ru[e];
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
  MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
    const int d = e / Bp, col = e % Bp;
    s.sb[e] = grid::float_to_bf16(d < K && col < bvn ? static_cast<float>(S[static_cast<int64_t>(d) * V + col]) : 0.0f);
  }
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
// >= Cp: K̃d, then −β e^b K̃); Y [2Cp, Bp] (rows < Cp: dÕ; rows >= Cp: dŨ', then dR̃); dS [Kp, Bp] (fp32, carried);
// dS̃ [Kp, Bp]; dU', then dR [Cp, Bp] (fp32). The dS update is one product over both halves:
//   dS ← e^{b_c} dS + Xᵀ Y = e^{b_c} dS + Σ_i e^{b_i} (scale q_i dO_i − β_i k_i dR_i).
template <class Acc>
struct StateBackwardMmaTiles {
  Gates<Acc> gates;
  bf16 *l, *x, *y, *dsb;
  Acc *dsf, *ru;
  MNEMO_HD StateBackwardMmaTiles(SharedArena& s, const Problem& p) : gates(s, p) {
    const std::size_t cp = mma_ld(p.chunk), kp = mma_ld(p.key_dim), bp = mma_ld(p.bv);
    l = s.take_aligned<bf16>(cp * cp, grid::kMmaAlign);
    x = s.take_aligned<bf16>(2 * cp * kp, grid::kMmaAlign);
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
  for (int64_t n = chunks - 1; n >= 0; --n) {
    const int64_t r0 = at.row0 + n * C;
    const int c = static_cast<int>(at.rows - n * C < C ? at.rows - n * C : C);
    const Acc* linv = linv_at(a.linv, p, at.chunk0 + n, at.head);
    Acc* dh = state_at(a.dh, p, at.chunk0 + n, at.head, at.v0);
    // Phase: gates, L̃⁻¹, dÕ, dS̃ = bf16(dS), and dh[chunk] = dS.
    load_gates_raw<Acc>(p, at.head, a.beta, a.g, r0, c, s.gates, lanes);
    MNEMO_FOR_LANES(e, Cp * Cp, lanes) {
      const int i = e / Cp, j = e % Cp;
      s.l[e] = grid::float_to_bf16(i < c && j < c ? static_cast<float>(linv[i * C + j]) : 0.0f);
    }
    load_rows_bf16<Acc>(p, a.dout, r0, at.head, V, at.v0, bvn, c, Cp, Bp, s.y, lanes);
    MNEMO_FOR_LANES(e, Kp * Bp, lanes) {
      const int d = e / Bp, col = e % Bp;
      s.dsb[e] = grid::float_to_bf16(static_cast<float>(s.dsf[e]));
      if (d < K && col < bvn) dh[static_cast<int64_t>(d) * V + col] = s.dsf[e];
    }
    grid::barrier();
    prefix_gates<Acc>(c, s.gates, lanes);
    grid::barrier();
    // Phase: X's halves Q̃ e^b scale and K̃d (k_j e^{b_c − b_j}).
    const Acc bc = s.gates.b[c - 1];
    MNEMO_FOR_LANES(e, Cp * Kp, lanes) {
      const int i = e / Kp, d = e % Kp;
      Acc qe = 0, kd = 0;
      if (i < c && d < K) {
        qe = scale * exp_acc(s.gates.b[i]) * load<Acc>(a.q[row_at(p, r0 + i, at.head, K, d)]);
        kd = exp_acc(bc - s.gates.b[i]) * load<Acc>(a.k[row_at(p, r0 + i, at.head, K, d)]);
      }
      s.x[e] = grid::float_to_bf16(static_cast<float>(qe));
      x_low[e] = grid::float_to_bf16(static_cast<float>(kd));
    }
    grid::barrier();
    block_mma<Layout::row, Layout::row>(lanes, Cp, Bp, Kp, x_low, Kp, s.dsb, Bp, s.ru, Bp, false);  // K̃d dS̃
    grid::barrier();
    // Phase: dŨ' = bf16(D + K̃d dS̃), D from the local stage.
    MNEMO_FOR_LANES(e, Cp * Bp, lanes) {
      const int j = e / Bp, col = e % Bp;
      const Acc du = j < c && col < bvn ? a.dr[row_at(p, r0 + j, at.head, V, at.v0 + col)] + s.ru[e] : Acc(0);
      y_low[e] = grid::float_to_bf16(static_cast<float>(du));
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
      const Acc kb = i < c && d < K ? -s.gates.beta[i] * exp_acc(s.gates.b[i]) *
                                          load<Acc>(a.k[row_at(p, r0 + i, at.head, K, d)])
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

}  // namespace mnemo::delta_rule_kernel
