// CUDA kernel of the whole Lattice recurrence (approximation (17) with chunk-start anchors, arXiv:2504.05646 §3 and
// App. B.1; docs/models.md#lattice), forward and backward, as block code (runtime/kernels/block_grid.cuh): the same
// functions run as CUDA kernels (scan_kernel.cu) and, over a sequential grid, on the host (fused_scan.cpp), where the
// CPU tests check them against the chunk form in fp64 and fp32 (tests/test_cuda_kernels_lattice.cpp). fla has no
// counterpart.
//
// One block is one (batch, head) and runs every token of the sequence: the chunk form dispatches ~30 small ops per
// chunk of C = 4 tokens, each waiting on the previous chunk's anchor, and keeps [C, C, m] gate products per chunk for
// its backward. Per block, slots S [m, d] (rows s_i), anchor A (the chunk-start state) with slot norms n_i = ‖A_i‖,
// per token t: q_t, k_t ∈ R^m, v_t ∈ R^d, γ_t, μ_t scalars:
//   gates    κ_i = k_i / n_i,  h = Σ_i κ_i A_i - v (DEC) | -v (DOT),  ĥ_i = A_i·h / n_i²,
//            x_i = κ_i² (‖h‖² - n_i² ĥ_i²),  B_i = μ² n_i² + γ² max(x_i, 0) + 1e-12,  β_i = n_i / sqrt(B_i),
//            g_i = β_i (μ + γ ĥ_i κ_i),  w_i = -β_i γ κ_i
//   state    S ← diag(g) S + w hᵀ,  y_t = Sᵀ q_t
//   chunk end (every C tokens from the chunk grid): s_i ← s_i n_i / ‖s_i‖, and the anchor becomes S.
// The chunks are cut as the chunk form cuts them: the first has C - p0 tokens (p0 = tokens of a chunk the state had
// already consumed), the last may be partial (no rescaling; the anchor stays).
//
// The forward keeps S and the anchor at the start of every kSegment chunks (`checkpoints`); the backward recomputes
// one segment's chunk-start states and one chunk's token states at a time from them (docs/gpu.md), so nothing of size
// T·m·d is kept. Each phase's work items are independent output elements computed whole by one lane; phases are
// separated by grid::barrier(). Every tensor is [blocks, rows, cols] contiguous in Acc (fp32 or fp64).
#pragma once

#include <cstdint>

#include "runtime/deep_memory/chunk_kernel.cuh"  // dot, slice, sqrt_acc
#include "runtime/kernels/block_grid.cuh"

namespace mnemo::lattice_kernel {

using deep_memory_kernel::dot;
using deep_memory_kernel::slice;
using deep_memory_kernel::sqrt_acc;
using grid::Lanes;

constexpr int kThreads = 256;
constexpr int kSegment = 16;  // chunks between two checkpoints

struct Dims {
  int64_t blocks;  // B·H
  int T, m, d;
  int C;           // chunk size
  int p0;          // tokens of the first chunk already consumed by the incoming state (0 ≤ p0 < C)
  bool dec;        // DEC (decoder loss) or DOT
};

// The chunk grid: chunk c covers tokens [start, start + len) and ends in a rescaling when `full`.
struct ChunkSpan {
  int start, len;
  bool full;
};
MNEMO_HD int chunk_count(const Dims& z) {
  const int first = z.C - z.p0;
  return z.T <= first ? (z.T > 0 ? 1 : 0) : 1 + (z.T - first + z.C - 1) / z.C;
}
MNEMO_HD ChunkSpan chunk_span(const Dims& z, int c) {
  const int first = z.C - z.p0;
  const int start = c == 0 ? 0 : first + (c - 1) * z.C;
  const int want = c == 0 ? first : z.C;
  const int len = z.T - start < want ? z.T - start : want;
  return {start, len, len == want};
}
MNEMO_HD int segment_count(const Dims& z) { return (chunk_count(z) + kSegment - 1) / kSegment; }

MNEMO_HD int64_t forward_work(const Dims& z) {
  const int64_t md = static_cast<int64_t>(z.m) * z.d;
  return 2 * md + 8 * z.m + z.d;
}
MNEMO_HD int64_t backward_work(const Dims& z) {
  const int64_t md = static_cast<int64_t>(z.m) * z.d;
  return static_cast<int64_t>(kSegment) * md + static_cast<int64_t>(z.C + 1) * md + 2 * md + 16 * z.m + 2 * z.d;
}

template <class Acc>
struct ForwardArgs {
  Dims z;
  const Acc *q, *k, *v, *ga, *mu, *S_init, *A_init;  // [T, m], [T, m], [T, d], [T], [T], [m, d], [m, d]
  Acc *y, *S_fin, *A_fin;                            // [T, d], [m, d], [m, d]
  Acc* ckpt;                                         // [segments, 2, m, d]: S and the anchor at each segment start
  Acc* work;
};

template <class Acc>
struct BackwardArgs {
  ForwardArgs<Acc> x;                   // inputs and checkpoints (outputs and x.work unused)
  const Acc *dy, *dS_fin, *dA_fin;      // output gradients (zeros where none)
  Acc *dq, *dk, *dv, *dga, *dmu, *dS_init, *dA_init;
  Acc* work;
};

// The per-token gate vectors of approximation (17), and what their adjoint reads back.
template <class Acc>
struct GateBuffers {
  Acc *h, *g, *w, *kap, *hh, *beta, *B, *x;  // h [d]; the rest [m]
};

// Phases computing token t's gates from the anchor A and its slot norms n (two barriers).
template <class Acc>
MNEMO_HD void gates(Lanes lanes, const Dims& z, const Acc* A, const Acc* n, const Acc* k, const Acc* v, Acc ga,
                    Acc mu, const GateBuffers<Acc>& b) {
  const int64_t m = z.m, d = z.d;
  MNEMO_FOR_LANES(j, d, lanes) {
    Acc s = 0;
    if (z.dec)
      for (int64_t i = 0; i < m; ++i) s += (k[i] / n[i]) * A[i * d + j];
    b.h[j] = s - v[j];
  }
  grid::barrier();
  MNEMO_FOR_LANES(i, m, lanes) {
    const Acc hsq = dot(b.h, b.h, d), ni = n[i], kap = k[i] / ni, hh = dot(A + i * d, b.h, d) / (ni * ni);
    const Acc x = kap * kap * (hsq - ni * ni * hh * hh);
    const Acc B = mu * mu * ni * ni + ga * ga * (x > 0 ? x : Acc(0)) + Acc(1e-12);
    const Acc beta = ni / sqrt_acc(B);
    b.kap[i] = kap, b.hh[i] = hh, b.x[i] = x, b.B[i] = B, b.beta[i] = beta;
    b.g[i] = beta * (mu + ga * hh * kap);
    b.w[i] = -beta * ga * kap;
  }
  grid::barrier();
}

// n_i = ‖A_i‖ (one phase and a barrier).
template <class Acc>
MNEMO_HD void slot_norms(Lanes lanes, int64_t m, int64_t d, const Acc* A, Acc* n) {
  MNEMO_FOR_LANES(i, m, lanes) n[i] = sqrt_acc(dot(A + i * d, A + i * d, d));
  grid::barrier();
}

// ---- forward ------------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void forward_block(const ForwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const Dims& z = a.z;
  const int64_t T = z.T, m = z.m, d = z.d, md = m * d;
  const Acc *q = slice(a.q, block, T * m), *k = slice(a.k, block, T * m), *v = slice(a.v, block, T * d),
            *ga = slice(a.ga, block, T), *mu = slice(a.mu, block, T), *S_init = slice(a.S_init, block, md),
            *A_init = slice(a.A_init, block, md);
  Acc *y = slice(a.y, block, T * d), *ckpt = slice(a.ckpt, block, 2 * md * segment_count(z));
  // Workspace: S, the anchor [m, d]; n and the gate vectors [m]; h [d].
  Acc *S = slice(a.work, block, forward_work(z)), *A = S + md, *n = A + md, *g = n + m, *w = g + m, *kap = w + m,
      *hh = kap + m, *beta = hh + m, *Bv = beta + m, *xv = Bv + m, *h = xv + m;
  const GateBuffers<Acc> b{h, g, w, kap, hh, beta, Bv, xv};
  MNEMO_FOR_LANES(i, md, lanes) S[i] = S_init[i], A[i] = z.p0 == 0 ? S_init[i] : A_init[i];
  grid::barrier();
  const int chunks = chunk_count(z);
  for (int c = 0; c < chunks; ++c) {
    if (c % kSegment == 0) {
      Acc* cp = ckpt + 2 * md * (c / kSegment);
      MNEMO_FOR_LANES(i, md, lanes) cp[i] = S[i], cp[md + i] = A[i];
    }
    slot_norms(lanes, m, d, A, n);
    const ChunkSpan span = chunk_span(z, c);
    for (int64_t t = span.start; t < span.start + span.len; ++t) {
      gates(lanes, z, A, n, k + t * m, v + t * d, ga[t], mu[t], b);
      MNEMO_FOR_LANES(item, md, lanes) {
        const int64_t i = item / d, j = item % d;
        S[item] = g[i] * S[item] + w[i] * h[j];
      }
      grid::barrier();
      MNEMO_FOR_LANES(j, d, lanes) {
        Acc s = 0;
        for (int64_t i = 0; i < m; ++i) s += q[t * m + i] * S[i * d + j];
        y[t * d + j] = s;
      }
      grid::barrier();
    }
    if (span.full) {  // s_i ← s_i n_i / ‖s_i‖, then the anchor is S
      MNEMO_FOR_LANES(i, m, lanes) {
        const Acc scale = n[i] / sqrt_acc(dot(S + i * d, S + i * d, d));
        for (int64_t j = 0; j < d; ++j) S[i * d + j] *= scale;
      }
      grid::barrier();
      MNEMO_FOR_LANES(i, md, lanes) A[i] = S[i];
      grid::barrier();
    }
  }
  Acc *S_fin = slice(a.S_fin, block, md), *A_fin = slice(a.A_fin, block, md);
  MNEMO_FOR_LANES(i, md, lanes) S_fin[i] = S[i], A_fin[i] = A[i];
}

// ---- backward -----------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void backward_block(const BackwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const ForwardArgs<Acc>& x = a.x;
  const Dims& z = x.z;
  const int64_t T = z.T, m = z.m, d = z.d, md = m * d, C = z.C;
  const Acc *q = slice(x.q, block, T * m), *k = slice(x.k, block, T * m), *v = slice(x.v, block, T * d),
            *ga = slice(x.ga, block, T), *mu = slice(x.mu, block, T),
            *ckpt = slice(x.ckpt, block, 2 * md * segment_count(z));
  const Acc *dy = slice(a.dy, block, T * d), *dS_fin = slice(a.dS_fin, block, md), *dA_fin = slice(a.dA_fin, block, md);
  Acc *dq = slice(a.dq, block, T * m), *dk = slice(a.dk, block, T * m), *dv = slice(a.dv, block, T * d),
      *dga = slice(a.dga, block, T), *dmu = slice(a.dmu, block, T);
  // Workspace: the segment's chunk-start states [kSegment, m, d]; the chunk's token states [C + 1, m, d]; the
  // adjoints of S and of the anchor [m, d]; per-slot vectors; h and its adjoint, a column scratch.
  Acc* wk = slice(a.work, block, backward_work(z));
  Acc *starts = wk, *Ss = starts + kSegment * md, *dS = Ss + (C + 1) * md, *dA = dS + md;
  Acc *n = dA + md, *dn = n + m, *g = dn + m, *w = g + m, *kap = w + m, *hh = kap + m, *beta = hh + m, *Bv = beta + m,
      *xv = Bv + m, *dg = xv + m, *dw = dg + m, *dhh = dw + m, *dkap = dhh + m, *rmu = dkap + m, *rga = rmu + m,
      *rhs = rga + m;
  Acc *h = rhs + m, *dh = h + d;
  const GateBuffers<Acc> b{h, g, w, kap, hh, beta, Bv, xv};
  const int chunks = chunk_count(z);

  // The final state's adjoints: S_fin is S after the last chunk and A_fin its anchor (S itself after a full chunk).
  const bool last_full = chunks > 0 && chunk_span(z, chunks - 1).full;
  MNEMO_FOR_LANES(i, md, lanes) {
    dS[i] = dS_fin[i] + (last_full ? dA_fin[i] : Acc(0));
    dA[i] = last_full ? Acc(0) : dA_fin[i];
  }
  grid::barrier();

  for (int seg = segment_count(z) - 1; seg >= 0; --seg) {
    const int c0 = seg * kSegment, c1 = c0 + kSegment < chunks ? c0 + kSegment : chunks;
    // Recompute the segment's chunk-start states (starts[c - c0]) from its checkpoint; the anchor of chunk c > 0 is
    // its start state, that of chunk 0 the checkpoint's anchor.
    const Acc *cp = ckpt + 2 * md * seg, *A0 = cp + md;
    MNEMO_FOR_LANES(i, md, lanes) starts[i] = cp[i];
    grid::barrier();
    for (int c = c0; c + 1 < c1; ++c) {
      const Acc* A = c == 0 ? A0 : starts + (c - c0) * md;
      Acc* S = Ss;  // the running state, copied to the next start after the chunk
      MNEMO_FOR_LANES(i, md, lanes) S[i] = starts[(c - c0) * md + i];
      slot_norms(lanes, m, d, A, n);
      const ChunkSpan span = chunk_span(z, c);
      for (int64_t t = span.start; t < span.start + span.len; ++t) {
        gates(lanes, z, A, n, k + t * m, v + t * d, ga[t], mu[t], b);
        MNEMO_FOR_LANES(item, md, lanes) S[item] = g[item / d] * S[item] + w[item / d] * h[item % d];
        grid::barrier();
      }
      MNEMO_FOR_LANES(i, m, lanes) {  // every chunk before the segment's last is full
        const Acc scale = n[i] / sqrt_acc(dot(S + i * d, S + i * d, d));
        for (int64_t j = 0; j < d; ++j) starts[(c + 1 - c0) * md + i * d + j] = S[i * d + j] * scale;
      }
      grid::barrier();
    }

    for (int c = c1 - 1; c >= c0; --c) {
      const Acc* A = c == 0 ? A0 : starts + (c - c0) * md;
      const ChunkSpan span = chunk_span(z, c);
      // The chunk's token states: Ss[0] its start, Ss[τ + 1] after token τ (before any rescaling).
      MNEMO_FOR_LANES(i, md, lanes) Ss[i] = starts[(c - c0) * md + i];
      MNEMO_FOR_LANES(i, m, lanes) dn[i] = 0;
      slot_norms(lanes, m, d, A, n);
      for (int64_t tau = 0; tau < span.len; ++tau) {
        const int64_t t = span.start + tau;
        gates(lanes, z, A, n, k + t * m, v + t * d, ga[t], mu[t], b);
        const Acc *Sp = Ss + tau * md;
        Acc* Sn = Ss + (tau + 1) * md;
        MNEMO_FOR_LANES(item, md, lanes) Sn[item] = g[item / d] * Sp[item] + w[item / d] * h[item % d];
        grid::barrier();
      }
      // Rescaling, in reverse: S_out,i = S_i n_i / r_i with r_i = ‖S_i‖:
      //   S̄_i = (n_i / r_i)(S̄_out,i - ŝ_i (ŝ_i·S̄_out,i)), ŝ_i = S_i / r_i;  n̄_i += S_i·S̄_out,i / r_i.
      if (span.full) {
        const Acc* Se = Ss + span.len * md;
        MNEMO_FOR_LANES(i, m, lanes) {
          const Acc r = sqrt_acc(dot(Se + i * d, Se + i * d, d)), sd = dot(Se + i * d, dS + i * d, d);
          dn[i] += sd / r;
          for (int64_t j = 0; j < d; ++j) dS[i * d + j] = (n[i] / r) * (dS[i * d + j] - Se[i * d + j] * sd / (r * r));
        }
        grid::barrier();
      }
      for (int64_t tau = span.len - 1; tau >= 0; --tau) {
        const int64_t t = span.start + tau;
        const Acc *Sp = Ss + tau * md, *Sn = Ss + (tau + 1) * md, *kt = k + t * m, *dyt = dy + t * d;
        const Acc gat = ga[t], mut = mu[t];
        gates(lanes, z, A, n, kt, v + t * d, gat, mut, b);
        // y_t = S_tᵀ q_t:  S̄ += q_t ȳ_tᵀ,  q̄_t = S_t ȳ_t.
        MNEMO_FOR_LANES(item, md, lanes) dS[item] += q[t * m + item / d] * dyt[item % d];
        MNEMO_FOR_LANES(i, m, lanes) dq[t * m + i] = dot(Sn + i * d, dyt, d);
        grid::barrier();
        // S_t = diag(g) S_{t-1} + w hᵀ:  ḡ_i = S̄_i·S_{t-1,i},  w̄_i = S̄_i·h,  h̄ = S̄ᵀ w.
        MNEMO_FOR_LANES(i, m, lanes) dg[i] = dot(dS + i * d, Sp + i * d, d), dw[i] = dot(dS + i * d, h, d);
        MNEMO_FOR_LANES(j, d, lanes) {
          Acc s = 0;
          for (int64_t i = 0; i < m; ++i) s += dS[i * d + j] * w[i];
          dh[j] = s;
        }
        grid::barrier();
        // The gates in reverse, per slot (the row's S̄ ← g_i S̄ for the token before):
        //   β̄ = ḡ (μ + γ ĥ κ) - w̄ γ κ,  B̄ = -β̄ n / (2 B^{3/2}),  x̄ = B̄ γ² [x ≥ 0],
        //   ĥ̄ = ḡ β γ κ - 2 x̄ κ² n² ĥ,  κ̄ = ḡ β γ ĥ - w̄ β γ + 2 x̄ κ (‖h‖² - n² ĥ²),
        //   n̄ += β̄ / sqrt(B) + 2 B̄ μ² n - 2 x̄ κ² n ĥ² - 2 ĥ̄ ĥ / n;
        // μ̄, γ̄ and ‖h‖²'s adjoint are summed over the slots.
        MNEMO_FOR_LANES(i, m, lanes) {
          const Acc ni = n[i], kp = kap[i], hv = hh[i], bt = beta[i], Bi = Bv[i], sB = sqrt_acc(Bi);
          const Acc hsq = dot(h, h, d);
          const Acc dbeta = dg[i] * (mut + gat * hv * kp) - dw[i] * gat * kp;
          const Acc dB = -dbeta * ni / (Acc(2) * Bi * sB);
          const Acc dx = xv[i] >= 0 ? dB * gat * gat : Acc(0);
          dhh[i] = dg[i] * bt * gat * kp - Acc(2) * dx * kp * kp * ni * ni * hv;
          dkap[i] = dg[i] * bt * gat * hv - dw[i] * bt * gat + Acc(2) * dx * kp * (hsq - ni * ni * hv * hv);
          dn[i] += dbeta / sB + Acc(2) * dB * mut * mut * ni - Acc(2) * dx * kp * kp * ni * hv * hv -
                   Acc(2) * dhh[i] * hv / ni;
          rmu[i] = dg[i] * bt + Acc(2) * dB * mut * ni * ni;
          rga[i] = dg[i] * bt * hv * kp - dw[i] * bt * kp + Acc(2) * dB * gat * (xv[i] > 0 ? xv[i] : Acc(0));
          rhs[i] = dx * kp * kp;
          for (int64_t j = 0; j < d; ++j) dS[i * d + j] *= g[i];
        }
        grid::barrier();
        // h̄ += 2 h Σ_i x̄_i κ_i² + Σ_i ĥ̄_i A_i / n_i²;  v̄ = -h̄;  μ̄, γ̄.
        MNEMO_FOR_LANES(j, d, lanes) {
          Acc s = 0, u = 0;
          for (int64_t i = 0; i < m; ++i) s += rhs[i], u += dhh[i] * A[i * d + j] / (n[i] * n[i]);
          dh[j] += Acc(2) * h[j] * s + u;
          dv[t * d + j] = -dh[j];
        }
        if (lanes.lane == 0) {
          Acc sm = 0, sg = 0;
          for (int64_t i = 0; i < m; ++i) sm += rmu[i], sg += rga[i];
          dmu[t] = sm, dga[t] = sg;
        }
        grid::barrier();
        // ĥ = A h / n², h = Σ κ_i A_i - v (DEC):  Ā_i += ĥ̄_i h / n_i² (+ κ_i h̄),  κ̄_i += A_i·h̄ (DEC),
        // κ = k / n:  k̄ = κ̄ / n,  n̄ -= κ̄ k / n².
        MNEMO_FOR_LANES(i, m, lanes) {
          const Acc ni = n[i];
          Acc dkp = dkap[i];
          if (z.dec) dkp += dot(A + i * d, dh, d);
          for (int64_t j = 0; j < d; ++j)
            dA[i * d + j] += dhh[i] * h[j] / (ni * ni) + (z.dec ? kap[i] * dh[j] : Acc(0));
          dk[t * m + i] = dkp / ni;
          dn[i] -= dkp * kt[i] / (ni * ni);
        }
        grid::barrier();
      }
      // n = ‖A_i‖:  Ā_i += n̄_i A_i / n_i.  Then hand S̄ and Ā to the chunk before (both are its end state), or to
      // the initial state and anchor.
      MNEMO_FOR_LANES(item, md, lanes) dA[item] += dn[item / d] * A[item] / n[item / d];
      grid::barrier();
      if (c > 0) {
        MNEMO_FOR_LANES(item, md, lanes) dS[item] += dA[item], dA[item] = 0;
        grid::barrier();
      }
    }
  }
  Acc *dS_init = slice(a.dS_init, block, md), *dA_init = slice(a.dA_init, block, md);
  MNEMO_FOR_LANES(i, md, lanes) {
    dS_init[i] = dS[i] + (z.p0 == 0 ? dA[i] : Acc(0));
    dA_init[i] = z.p0 == 0 ? Acc(0) : dA[i];
  }
}

}  // namespace mnemo::lattice_kernel
