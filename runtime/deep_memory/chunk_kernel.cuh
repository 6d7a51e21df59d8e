// CUDA kernel of one chunk of the deep-memory dual form (fused_chunk.h), forward and backward, as block code
// (runtime/kernels/block_grid.cuh): the same functions run as CUDA kernels (chunk_kernel.cu) and, over a
// sequential grid, on the host (fused_chunk_kernel.cpp), where the CPU tests check them against the node's tensor
// form and autograd through the composed form in fp64 and fp32 (tests/test_fused_chunk.cpp).
//
// The memory is the residual MLP M(z) = z + W_1 GELU(W_2 φ(z)) of Titans (arXiv:2501.00663 §3.1, the chunk-wise
// dual form of §3.2 with momentum, decay and the inner-gradient clip) and of the Atlas GD family (arXiv:2505.23735
// §7.6: the Omega window, a feature map, ℓ2 or dot loss). One block is one (batch, head); the caller runs the
// chunks in order (the weights carry from one to the next), so a chunk is one launch forward and one backward
// instead of the ~150 small ops of the tensor form. Per block, tokens as rows (n read, N ≥ n terms written),
// widths d (q, k, v), f (φq, φk), hid (the MLP's hidden layer), W0, S0, Â0 [hid, f], W1, S1, Â1 [d, hid]:
//   anchor pass   H0 = φK Â0ᵀ, G0 = GELU(H0), g_y = K + G0 Â1ᵀ - V (ℓ2) or -V (dot), R = g_y Â1,
//                 Δ = R ⊙ GELU'(H0)
//   clip (τ > 0)  s = |Δ|²|φK|² + |g_y|²|G0|²,  f = τ / sqrt(max(τ², s)),  c0 = f Δ, c1 = f g_y (else c0 = Δ, c1 = g_y)
//   read-out      H = A⊙(φQ W0ᵀ) + D⊙(φQ S0ᵀ) - (C ⊙ φQ φKᵀ) c0,  Ga = GELU(H),
//                 Y = Q + A⊙(Ga W1ᵀ) + D⊙(Ga S1ᵀ) - (C ⊙ Ga G0ᵀ) c1
//   chunk end     W0' = a W0 + d S0 - c0ᵀ diag(c_end) φK,  W1' = a W1 + d S1 - c1ᵀ diag(c_end) G0,
//                 S0' = p S0 - c0ᵀ diag(e_end) φK,         S1' = p S1 - c1ᵀ diag(e_end) G0
// The backward is the adjoint of each line in reverse (fused_chunk.cpp states it line by line); it reads the
// forward's saved intermediates (fused_chunk_forms.h: the same ones the other forms keep).
//
// Every tensor is [blocks, rows, cols] contiguous in Acc (fp32 or fp64: the recurrence's precision rule,
// docs/models.md#numerical-stability); the [blocks] scalars a, d, p and the [blocks, N] rows c_end, e_end likewise.
// Intermediates live in a global workspace slice per block (forward_work / backward_work elements): with hid up to
// 4·d they pass the shared memory of a block. Each phase's work items are independent output elements, each
// computed whole by one lane (its sums in a fixed order), so a phase has no race and the host run computes every
// element as the device does; phases are separated by grid::barrier(). The matrix products are block_product calls
// (runtime/kernels/block_mma.cuh): an element a lane, or with Dims::bf16_products a 16×16 tile a warp on tensor
// cores (bf16 operands, fp32 sums), which the host run rounds the same way.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/bf16.cuh"
#include "runtime/kernels/block_grid.cuh"
#include "runtime/kernels/block_mma.cuh"

namespace mnemo::deep_memory_kernel {

using grid::Lanes;

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0 && kThreads <= 32 * grid::kProductWarps, "block_product's warps");

struct Dims {
  int64_t blocks;  // B·H
  int n, N, d, f, hid;
  bool mom, l2;
  double tau;  // inner-gradient clip (0: off)
  // The products with bf16 operands and fp32 sums (tensor cores; Acc float only), as under a bf16 run on CUDA
  // (bf16_products_enabled, runtime/kernels/precision.h); the weights, momentum and every elementwise step stay Acc.
  bool bf16_products;
};

// Workspace elements (Acc) of one block.
MNEMO_HD int64_t forward_work(const Dims& z) { return 2 * static_cast<int64_t>(z.N) * z.hid; }
MNEMO_HD int64_t backward_work(const Dims& z) {
  const int64_t N = z.N, n = z.n;
  return 3 * N * z.hid + 3 * N * z.d + 2 * N * z.f + n * N + n * z.hid + 2 * n * z.f + kThreads;
}

template <class Acc>
struct ForwardArgs {
  Dims z;
  // inputs (S0, S1, D, de, pe, ee: with momentum only)
  const Acc *q, *qf, *k, *kf, *v, *W0, *W1, *S0, *S1, *A0, *A1, *A, *D, *C, *ae, *de, *ce, *pe, *ee;
  // outputs
  Acc *y, *w0, *w1, *s0, *s1;
  // saved for the backward: P0 = GELU'(H0), G0, E = g_y, RP0d = R ⊙ GELU''(H0), Dl = Δ, c0, c1 (= Dl, E without
  // the clip), QK = φQ φKᵀ, X1 = Ga W1ᵀ, M1 = Ga S1ᵀ, GG = Ga G0ᵀ, Ga, Pa = GELU'(H); the clip's per-row |φk|²,
  // |Δ|², |g_y|², |G0|², s and f (τ > 0)
  Acc *P0, *G0, *E, *RP0d, *Dl, *c0, *c1, *QK, *X1, *M1, *GG, *Ga, *Pa;
  Acc *kk, *dd, *eev, *gg, *sv, *fv;
  Acc* work;  // forward_work(z) per block
};

template <class Acc>
struct BackwardArgs {
  ForwardArgs<Acc> x;                 // inputs and saved intermediates (outputs and x.work unused)
  const Acc *gy, *gw0, *gw1, *gs0, *gs1;  // output gradients (zeros where none; gs*: with momentum)
  Acc *gqf, *gk, *gkf, *gv, *gW0, *gW1, *gS0, *gS1, *gA0, *gA1, *gA, *gD, *gC, *gae, *gde, *gce, *gpe, *gee;
  Acc* work;  // backward_work(z) per block
};

// The block's slice of a [blocks, rows, cols] tensor (null stays null).
template <class P>
MNEMO_HD P* slice(P* p, int64_t block, int64_t elements) { return p ? p + block * elements : p; }

template <class Acc>
MNEMO_HD Acc dot(const Acc* a, const Acc* b, int64_t n) {
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// erf and sqrt in the accumulation type on both sides (erff, sqrtf for float on the device).
template <class Acc>
MNEMO_HD Acc erf_acc(Acc x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return erff(x);
  else return erf(x);
#else
  return std::erf(x);
#endif
}
template <class Acc>
MNEMO_HD Acc sqrt_acc(Acc x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return sqrtf(x);
  else return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// Exact GELU at x: value x Φ(x), derivative Φ(x) + x φ(x), second derivative φ(x)(2 - x²).
template <class Acc>
struct Gelu {
  Acc value, grad, second;
};
template <class Acc>
MNEMO_HD Gelu<Acc> gelu(Acc x) {
  const Acc inv_sqrt2 = Acc(0.70710678118654752440), inv_sqrt_2pi = Acc(0.39894228040143267794);
  const Acc cdf = Acc(0.5) * (Acc(1) + erf_acc(x * inv_sqrt2));
  const Acc pdf = grid::exp_acc(Acc(-0.5) * x * x) * inv_sqrt_2pi;
  return {x * cdf, cdf + x * pdf, pdf * (Acc(2) - x * x)};
}

// Σ term(i) over [0, count), the same value returned to every lane: per-lane partials in red[lanes.count], a
// barrier, then each lane adds the partials in lane order. Every lane of the block must call it.
template <class Acc, class Term>
MNEMO_HD Acc block_sum(Lanes lanes, Acc* red, int64_t count, Term term) {
  Acc s = 0;
  MNEMO_FOR_LANES(i, count, lanes) s += term(i);
  red[lanes.lane] = s;
  grid::barrier();
  Acc total = 0;
  for (int l = 0; l < lanes.count; ++l) total += red[l];
  grid::barrier();  // red is free again
  return total;
}

// The block's products (block_mma.cuh block_product): Σ_p a(i, p) b(p, j) into out(i, j, sum), in Acc, or with
// bf16 operands and fp32 sums on tensor cores when the launch asked for them (Dims::bf16_products).
template <class Acc>
struct Products {
  Lanes lanes;
  bool bf16;
  template <class AFn, class BFn, class Out>
  MNEMO_HD void operator()(int64_t M, int64_t N, int64_t K, AFn a, BFn b, Out out) const {
    grid::block_product<Acc>(lanes, bf16, M, N, K, a, b, out);
  }
};

// ---- forward ------------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void forward_block(const ForwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const Dims& z = a.z;
  const int64_t n = z.n, N = z.N, d = z.d, f = z.f, hid = z.hid;
  const bool mom = z.mom, l2 = z.l2;
  const Acc tau = static_cast<Acc>(z.tau);
  const Products<Acc> product{lanes, z.bf16_products};
  const Acc *q = slice(a.q, block, n * d), *qf = slice(a.qf, block, n * f), *k = slice(a.k, block, N * d),
            *kf = slice(a.kf, block, N * f), *v = slice(a.v, block, N * d);
  const Acc *W0 = slice(a.W0, block, hid * f), *W1 = slice(a.W1, block, d * hid), *A0 = slice(a.A0, block, hid * f),
            *A1 = slice(a.A1, block, d * hid);
  const Acc *S0 = mom ? slice(a.S0, block, hid * f) : nullptr, *S1 = mom ? slice(a.S1, block, d * hid) : nullptr;
  const Acc *A = slice(a.A, block, n), *D = mom ? slice(a.D, block, n) : nullptr, *C = slice(a.C, block, n * N);
  const Acc *ce = slice(a.ce, block, N), *ee = mom ? slice(a.ee, block, N) : nullptr;
  Acc *P0 = slice(a.P0, block, N * hid), *G0 = slice(a.G0, block, N * hid), *E = slice(a.E, block, N * d),
      *RP0d = slice(a.RP0d, block, N * hid), *Dl = slice(a.Dl, block, N * hid), *c0 = slice(a.c0, block, N * hid),
      *c1 = slice(a.c1, block, N * d), *QK = slice(a.QK, block, n * N), *X1 = slice(a.X1, block, n * d),
      *M1 = mom ? slice(a.M1, block, n * d) : nullptr, *GG = slice(a.GG, block, n * N),
      *Ga = slice(a.Ga, block, n * hid), *Pa = slice(a.Pa, block, n * hid);
  Acc *H0 = slice(a.work, block, forward_work(z)), *second = H0 + N * hid;

  // Anchor pass: H0 = φK Â0ᵀ; G0, GELU', GELU''; g_y; R = g_y Â1 with Δ = R ⊙ GELU'(H0) and R ⊙ GELU''(H0).
  product(
      N, hid, f,
      [&](int64_t r, int64_t p) { return kf[r * f + p]; },
      [&](int64_t p, int64_t j) { return A0[j * f + p]; },
      [&](int64_t r, int64_t j, Acc s) { H0[r * hid + j] = s; });
  grid::barrier();
  MNEMO_FOR_LANES(i, N * hid, lanes) {
    const Gelu<Acc> g = gelu(H0[i]);
    G0[i] = g.value, P0[i] = g.grad, second[i] = g.second;
  }
  grid::barrier();
  if (l2) {
    product(
        N, d, hid, [&](int64_t r, int64_t p) { return G0[r * hid + p]; },
        [&](int64_t p, int64_t j) { return A1[j * hid + p]; },
        [&](int64_t r, int64_t j, Acc s) { E[r * d + j] = s + k[r * d + j] - v[r * d + j]; });
  } else {
    MNEMO_FOR_LANES(item, N * d, lanes) { E[item] = -v[item]; }
  }
  grid::barrier();
  product(
      N, hid, d,
      [&](int64_t r, int64_t p) { return E[r * d + p]; },
      [&](int64_t p, int64_t j) { return A1[p * hid + j]; },
      [&](int64_t r, int64_t j, Acc R) {
        Dl[r * hid + j] = R * P0[r * hid + j];
        RP0d[r * hid + j] = R * second[r * hid + j];
      });
  grid::barrier();
  // Clip (memory.h clip_grad_terms), one row per work item.
  if (tau > 0) {
    Acc *kk = slice(a.kk, block, N), *dd = slice(a.dd, block, N), *eev = slice(a.eev, block, N),
        *gg = slice(a.gg, block, N), *s = slice(a.sv, block, N), *fv = slice(a.fv, block, N);
    MNEMO_FOR_LANES(r, N, lanes) {
      const Acc *kr = kf + r * f, *dl = Dl + r * hid, *e = E + r * d, *g = G0 + r * hid;
      kk[r] = dot(kr, kr, f), dd[r] = dot(dl, dl, hid), eev[r] = dot(e, e, d), gg[r] = dot(g, g, hid);
      s[r] = dd[r] * kk[r] + eev[r] * gg[r];
      const Acc fr = fv[r] = tau / sqrt_acc(s[r] > tau * tau ? s[r] : tau * tau);
      for (int64_t j = 0; j < hid; ++j) c0[r * hid + j] = dl[j] * fr;
      for (int64_t j = 0; j < d; ++j) c1[r * d + j] = e[j] * fr;
    }
    grid::barrier();
  }
  // Read-out, layer 0: QK, then H = [A⊙φQ | D⊙φQ | −C⊙QK] [W0ᵀ; S0ᵀ; c0] (one product over f + f + N) and
  // Ga = GELU(H) per element.
  product(
      n, N, f, [&](int64_t i, int64_t p) { return qf[i * f + p]; }, [&](int64_t p, int64_t r) { return kf[r * f + p]; },
      [&](int64_t i, int64_t r, Acc s) { QK[i * N + r] = s; });
  grid::barrier();
  const int64_t f_mom = mom ? 2 * f : f;  // the read-out's weight columns: W0, and S0 with momentum
  product(
      n, hid, f_mom + N,
      [&](int64_t i, int64_t p) {
        return p < f       ? A[i] * qf[i * f + p]
               : p < f_mom ? D[i] * qf[i * f + p - f]
                           : -C[i * N + p - f_mom] * QK[i * N + p - f_mom];
      },
      [&](int64_t p, int64_t j) {
        return p < f ? W0[j * f + p] : p < f_mom ? S0[j * f + p - f] : c0[(p - f_mom) * hid + j];
      },
      [&](int64_t i, int64_t j, Acc h) {
        const Gelu<Acc> g = gelu(h);
        Ga[i * hid + j] = g.value, Pa[i * hid + j] = g.grad;
      });
  grid::barrier();
  // Layer 1's products: X1 = Ga W1ᵀ, M1 = Ga S1ᵀ, GG = Ga G0ᵀ.
  auto ga = [&](int64_t i, int64_t p) { return Ga[i * hid + p]; };
  product(
      n, d, hid, ga, [&](int64_t p, int64_t j) { return W1[j * hid + p]; },
      [&](int64_t i, int64_t j, Acc s) { X1[i * d + j] = s; });
  if (mom)
    product(
        n, d, hid, ga, [&](int64_t p, int64_t j) { return S1[j * hid + p]; },
        [&](int64_t i, int64_t j, Acc s) { M1[i * d + j] = s; });
  product(
      n, N, hid, ga, [&](int64_t p, int64_t r) { return G0[r * hid + p]; },
      [&](int64_t i, int64_t r, Acc s) { GG[i * N + r] = s; });
  grid::barrier();
  // y = q + A⊙X1 + D⊙M1 − (C ⊙ GG) c1, and the chunk-end weights and momentum (these read only the anchor pass and
  // the inputs): W0' = a W0 + d S0 − c0ᵀ diag(c_end) φK, S0' = p S0 − c0ᵀ diag(e_end) φK, and layer 1 with c1, G0.
  Acc *y = slice(a.y, block, n * d), *w0 = slice(a.w0, block, hid * f), *w1 = slice(a.w1, block, d * hid);
  Acc *s0 = mom ? slice(a.s0, block, hid * f) : nullptr, *s1 = mom ? slice(a.s1, block, d * hid) : nullptr;
  product(
      n, d, N, [&](int64_t i, int64_t r) { return C[i * N + r] * GG[i * N + r]; },
      [&](int64_t r, int64_t j) { return c1[r * d + j]; },
      [&](int64_t i, int64_t j, Acc score) {
        const int64_t at = i * d + j;
        y[at] = q[at] + A[i] * X1[at] + (mom ? D[i] * M1[at] : Acc(0)) - score;
      });
  const Acc a_end = *slice(a.ae, block, 1), d_end = mom ? *slice(a.de, block, 1) : Acc(0),
            p_end = mom ? *slice(a.pe, block, 1) : Acc(0);
  auto c0_t = [&](int64_t i, int64_t r) { return c0[r * hid + i]; };
  auto c1_t = [&](int64_t i, int64_t r) { return c1[r * d + i]; };
  product(
      hid, f, N, c0_t, [&](int64_t r, int64_t j) { return ce[r] * kf[r * f + j]; },
      [&](int64_t i, int64_t j, Acc u) {
        w0[i * f + j] = a_end * W0[i * f + j] + (mom ? d_end * S0[i * f + j] : Acc(0)) - u;
      });
  product(
      d, hid, N, c1_t, [&](int64_t r, int64_t j) { return ce[r] * G0[r * hid + j]; },
      [&](int64_t i, int64_t j, Acc u) {
        w1[i * hid + j] = a_end * W1[i * hid + j] + (mom ? d_end * S1[i * hid + j] : Acc(0)) - u;
      });
  if (mom) {
    product(
        hid, f, N, c0_t, [&](int64_t r, int64_t j) { return ee[r] * kf[r * f + j]; },
        [&](int64_t i, int64_t j, Acc u) { s0[i * f + j] = p_end * S0[i * f + j] - u; });
    product(
        d, hid, N, c1_t, [&](int64_t r, int64_t j) { return ee[r] * G0[r * hid + j]; },
        [&](int64_t i, int64_t j, Acc u) { s1[i * hid + j] = p_end * S1[i * hid + j] - u; });
  }
}

// ---- backward -----------------------------------------------------------------------------------------------
// The terms of one read-out layer's adjoint, out = A⊙(x Wᵀ) + D⊙(x Sᵀ) - (C ⊙ x rᵀ) c with XR = x rᵀ, that need only
// ō [n, wo] (x [n, wx], c [N, wo], W̄ and S̄ [wo, wx]), in one phase:
//   S̄c = -ō cᵀ,  C̄ = S̄c ⊙ XR (first layer) or C̄ += S̄c ⊙ XR,  S̄c' = S̄c ⊙ C (into gSc),
//   W̄ += (A⊙ō)ᵀ x,  S̄ += (D⊙ō)ᵀ x (momentum),  c̄ -= (C ⊙ XR)ᵀ ō.
template <class Acc>
MNEMO_HD void readout_adjoint_terms(const Products<Acc>& product, int64_t n, int64_t N, int64_t wo, int64_t wx,
                                   bool mom, bool first, const Acc* go, const Acc* x, const Acc* c, const Acc* XR,
                                   const Acc* A, const Acc* D, const Acc* C, Acc* gC, Acc* gSc, Acc* gW, Acc* gS,
                                   Acc* gc) {
  auto go_at = [&](int64_t i, int64_t p) { return go[i * wo + p]; };
  product(
      n, N, wo, go_at, [&](int64_t p, int64_t r) { return c[r * wo + p]; },
      [&](int64_t i, int64_t r, Acc s) {
        const int64_t at = i * N + r;
        gC[at] = (first ? Acc(0) : gC[at]) - s * XR[at];
        gSc[at] = -s * C[at];
      });
  auto x_at = [&](int64_t i, int64_t j) { return x[i * wx + j]; };
  product(
      wo, wx, n, [&](int64_t p, int64_t i) { return A[i] * go[i * wo + p]; }, x_at,
      [&](int64_t p, int64_t j, Acc u) { gW[p * wx + j] += u; });
  if (mom)
    product(
        wo, wx, n, [&](int64_t p, int64_t i) { return D[i] * go[i * wo + p]; }, x_at,
        [&](int64_t p, int64_t j, Acc u) { gS[p * wx + j] += u; });
  product(
      N, wo, n, [&](int64_t r, int64_t i) { return C[i * N + r] * XR[i * N + r]; }, go_at,
      [&](int64_t r, int64_t p, Acc u) { gc[r * wo + p] -= u; });
}

template <class Acc>
MNEMO_HD void backward_block(const BackwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const ForwardArgs<Acc>& x = a.x;
  const Dims& z = x.z;
  const int64_t n = z.n, N = z.N, d = z.d, f = z.f, hid = z.hid;
  const bool mom = z.mom, l2 = z.l2;
  const Acc tau = static_cast<Acc>(z.tau);
  const Products<Acc> product{lanes, z.bf16_products};
  const Acc *qf = slice(x.qf, block, n * f), *kf = slice(x.kf, block, N * f);
  const Acc *W0 = slice(x.W0, block, hid * f), *W1 = slice(x.W1, block, d * hid), *A0 = slice(x.A0, block, hid * f),
            *A1 = slice(x.A1, block, d * hid);
  const Acc *S0 = mom ? slice(x.S0, block, hid * f) : nullptr, *S1 = mom ? slice(x.S1, block, d * hid) : nullptr;
  const Acc *A = slice(x.A, block, n), *D = mom ? slice(x.D, block, n) : nullptr, *C = slice(x.C, block, n * N);
  const Acc *ce = slice(x.ce, block, N), *ee = mom ? slice(x.ee, block, N) : nullptr;
  const Acc *P0 = slice(x.P0, block, N * hid), *G0 = slice(x.G0, block, N * hid), *E = slice(x.E, block, N * d),
            *RP0d = slice(x.RP0d, block, N * hid), *Dl = slice(x.Dl, block, N * hid),
            *c0 = slice(x.c0, block, N * hid), *c1 = slice(x.c1, block, N * d), *QK = slice(x.QK, block, n * N),
            *X1 = slice(x.X1, block, n * d), *M1 = mom ? slice(x.M1, block, n * d) : nullptr,
            *GG = slice(x.GG, block, n * N), *Ga = slice(x.Ga, block, n * hid), *Pa = slice(x.Pa, block, n * hid);
  const Acc *gy = slice(a.gy, block, n * d), *gw0 = slice(a.gw0, block, hid * f), *gw1 = slice(a.gw1, block, d * hid);
  const Acc *gs0 = mom ? slice(a.gs0, block, hid * f) : nullptr, *gs1 = mom ? slice(a.gs1, block, d * hid) : nullptr;
  Acc *gqf = slice(a.gqf, block, n * f), *gk = l2 ? slice(a.gk, block, N * d) : nullptr,
      *gkf = slice(a.gkf, block, N * f), *gv = slice(a.gv, block, N * d), *gW0 = slice(a.gW0, block, hid * f),
      *gW1 = slice(a.gW1, block, d * hid), *gA0 = slice(a.gA0, block, hid * f), *gA1 = slice(a.gA1, block, d * hid),
      *gA = slice(a.gA, block, n), *gC = slice(a.gC, block, n * N), *gce = slice(a.gce, block, N);
  Acc *gS0 = mom ? slice(a.gS0, block, hid * f) : nullptr, *gS1 = mom ? slice(a.gS1, block, d * hid) : nullptr,
      *gD = mom ? slice(a.gD, block, n) : nullptr, *gee = mom ? slice(a.gee, block, N) : nullptr;
  // Workspace: the adjoints of c0 (then Δ), G0 (then H0), R, c1 (then g_y); Z0 = c0 W̄0, Zs0 = c0 S̄0 [N, f];
  // RW1 = G0 W̄1ᵀ, RS1 = G0 S̄1ᵀ [N, d]; S̄c' [n, N]; H̄ [n, hid]; H̄ W0, H̄ S0 [n, f]; the lanes' partial sums.
  Acc* w = slice(a.work, block, backward_work(z));
  Acc *gc0 = w, *gG0 = gc0 + N * hid, *gR = gG0 + N * hid, *gc1 = gR + N * hid, *RW1 = gc1 + N * d,
      *RS1 = RW1 + N * d, *Z0 = RS1 + N * d, *Zs0 = Z0 + N * f, *gSc = Zs0 + N * f, *gH = gSc + n * N,
      *PW = gH + n * hid, *PS = PW + n * f, *red = PS + n * f;
  const Acc a_end = *slice(x.ae, block, 1), d_end = mom ? *slice(x.de, block, 1) : Acc(0),
            p_end = mom ? *slice(x.pe, block, 1) : Acc(0);

  // Chunk end, in reverse: W̄ scaled into the weights' gradients; ā, d̄, p̄ = ⟨W̄, W⟩ sums;
  // c̄0 = -[c_end ⊙ φk | e_end ⊙ φk] [W̄0ᵀ; S̄0ᵀ], Ḡ0 = -[c_end ⊙ c1 | e_end ⊙ c1] [W̄1; S̄1], and the [N, f] /
  // [N, d] products Z0, Zs0, RW1, RS1 for φ̄k, c̄1, c̄_end, ē_end below.
  const Acc sum_a = block_sum<Acc>(lanes, red, hid * f + d * hid, [&](int64_t i) {
    return i < hid * f ? gw0[i] * W0[i] : gw1[i - hid * f] * W1[i - hid * f];
  });
  const Acc sum_d = mom ? block_sum<Acc>(lanes, red, hid * f + d * hid, [&](int64_t i) {
    return i < hid * f ? gw0[i] * S0[i] : gw1[i - hid * f] * S1[i - hid * f];
  }) : Acc(0);
  const Acc sum_p = mom ? block_sum<Acc>(lanes, red, hid * f + d * hid, [&](int64_t i) {
    return i < hid * f ? gs0[i] * S0[i] : gs1[i - hid * f] * S1[i - hid * f];
  }) : Acc(0);
  if (lanes.lane == 0) {
    *slice(a.gae, block, 1) = sum_a;
    if (mom) *slice(a.gde, block, 1) = sum_d, *slice(a.gpe, block, 1) = sum_p;
  }
  MNEMO_FOR_LANES(i, hid * f, lanes) {
    gW0[i] = a_end * gw0[i];
    if (mom) gS0[i] = d_end * gw0[i] + p_end * gs0[i];
  }
  MNEMO_FOR_LANES(i, d * hid, lanes) {
    gW1[i] = a_end * gw1[i];
    if (mom) gS1[i] = d_end * gw1[i] + p_end * gs1[i];
  }
  const int64_t f_mom = mom ? 2 * f : f, d_mom = mom ? 2 * d : d;
  product(
      N, hid, f_mom, [&](int64_t r, int64_t p) { return p < f ? ce[r] * kf[r * f + p] : ee[r] * kf[r * f + p - f]; },
      [&](int64_t p, int64_t i) { return p < f ? gw0[i * f + p] : gs0[i * f + p - f]; },
      [&](int64_t r, int64_t i, Acc u) { gc0[r * hid + i] = -u; });
  product(
      N, hid, d_mom, [&](int64_t r, int64_t p) { return p < d ? ce[r] * c1[r * d + p] : ee[r] * c1[r * d + p - d]; },
      [&](int64_t p, int64_t i) { return p < d ? gw1[p * hid + i] : gs1[(p - d) * hid + i]; },
      [&](int64_t r, int64_t i, Acc u) { gG0[r * hid + i] = -u; });
  auto c0_at = [&](int64_t r, int64_t i) { return c0[r * hid + i]; };
  auto g0_at = [&](int64_t r, int64_t i) { return G0[r * hid + i]; };
  product(
      N, f, hid, c0_at, [&](int64_t i, int64_t j) { return gw0[i * f + j]; },
      [&](int64_t r, int64_t j, Acc s) { Z0[r * f + j] = s; });
  product(
      N, d, hid, g0_at, [&](int64_t i, int64_t j) { return gw1[j * hid + i]; },
      [&](int64_t r, int64_t j, Acc s) { RW1[r * d + j] = s; });
  if (mom) {
    product(
        N, f, hid, c0_at, [&](int64_t i, int64_t j) { return gs0[i * f + j]; },
        [&](int64_t r, int64_t j, Acc s) { Zs0[r * f + j] = s; });
    product(
        N, d, hid, g0_at, [&](int64_t i, int64_t j) { return gs1[j * hid + i]; },
        [&](int64_t r, int64_t j, Acc s) { RS1[r * d + j] = s; });
  }
  grid::barrier();
  // φ̄k = -c_end ⊙ Z0 - e_end ⊙ Zs0, c̄1 = -c_end ⊙ RW1 - e_end ⊙ RS1, c̄_end = -rowsum(Z0 ⊙ φk) - rowsum(c1 ⊙ RW1).
  MNEMO_FOR_LANES(r, N, lanes) {
    gce[r] = -(dot(Z0 + r * f, kf + r * f, f) + dot(c1 + r * d, RW1 + r * d, d));
    if (mom) gee[r] = -(dot(Zs0 + r * f, kf + r * f, f) + dot(c1 + r * d, RS1 + r * d, d));
    for (int64_t j = 0; j < f; ++j) gkf[r * f + j] = -ce[r] * Z0[r * f + j] - (mom ? ee[r] * Zs0[r * f + j] : Acc(0));
    for (int64_t j = 0; j < d; ++j) gc1[r * d + j] = -ce[r] * RW1[r * d + j] - (mom ? ee[r] * RS1[r * d + j] : Acc(0));
  }
  grid::barrier();

  // Read-out layer 1 (x = Ga, r = G0, c = c1, ō = ȳ): Ā = rowsum(ȳ ⊙ X1), D̄ = rowsum(ȳ ⊙ M1), W̄1 += (A⊙ȳ)ᵀ Ga,
  // S̄1 += (D⊙ȳ)ᵀ Ga, S̄c = -ȳ c1ᵀ, C̄ = S̄c ⊙ GG, S̄c' = S̄c ⊙ C, c̄1 -= (C ⊙ GG)ᵀ ȳ.
  MNEMO_FOR_LANES(i, n, lanes) {
    gA[i] = dot(gy + i * d, X1 + i * d, d);
    if (mom) gD[i] = dot(gy + i * d, M1 + i * d, d);
  }
  readout_adjoint_terms<Acc>(product, n, N, d, hid, mom, /*first=*/true, gy, Ga, c1, GG, A, D, C, gC, gSc, gW1, gS1,
                             gc1);
  grid::barrier();
  // H̄ = GELU'(H) ⊙ ([A⊙ȳ | D⊙ȳ | S̄c'] [W1; S1; G0]) (one product over d + d + N);  Ḡ0 += S̄c'ᵀ Ga.
  product(
      n, hid, d_mom + N,
      [&](int64_t i, int64_t p) {
        return p < d ? A[i] * gy[i * d + p] : p < d_mom ? D[i] * gy[i * d + p - d] : gSc[i * N + p - d_mom];
      },
      [&](int64_t p, int64_t j) {
        return p < d ? W1[p * hid + j] : p < d_mom ? S1[(p - d) * hid + j] : G0[(p - d_mom) * hid + j];
      },
      [&](int64_t i, int64_t j, Acc s) { gH[i * hid + j] = Pa[i * hid + j] * s; });
  product(
      N, hid, n, [&](int64_t r, int64_t i) { return gSc[i * N + r]; },
      [&](int64_t i, int64_t j) { return Ga[i * hid + j]; },
      [&](int64_t r, int64_t j, Acc u) { gG0[r * hid + j] += u; });
  grid::barrier();

  // Read-out layer 0 (x = φq, r = φk, c = c0, ō = H̄): PW = H̄ W0, PS = H̄ S0, W̄0 += H̄ᵀ (A⊙φq), S̄0 += H̄ᵀ (D⊙φq),
  // S̄c = -H̄ c0ᵀ, C̄ += S̄c ⊙ QK, S̄c' = S̄c ⊙ C, c̄0 -= (C ⊙ QK)ᵀ H̄.
  auto gh_at = [&](int64_t i, int64_t j) { return gH[i * hid + j]; };
  product(
      n, f, hid, gh_at, [&](int64_t j, int64_t p) { return W0[j * f + p]; },
      [&](int64_t i, int64_t p, Acc s) { PW[i * f + p] = s; });
  if (mom)
    product(
        n, f, hid, gh_at, [&](int64_t j, int64_t p) { return S0[j * f + p]; },
        [&](int64_t i, int64_t p, Acc s) { PS[i * f + p] = s; });
  readout_adjoint_terms<Acc>(product, n, N, hid, f, mom, /*first=*/false, gH, qf, c0, QK, A, D, C, gC, gSc, gW0, gS0,
                             gc0);
  grid::barrier();
  // Ā += rowsum(PW ⊙ φq), D̄ += rowsum(PS ⊙ φq), φ̄q = A⊙PW + D⊙PS + S̄c' φk, φ̄k += S̄c'ᵀ φq.
  MNEMO_FOR_LANES(i, n, lanes) {
    gA[i] += dot(PW + i * f, qf + i * f, f);
    if (mom) gD[i] += dot(PS + i * f, qf + i * f, f);
  }
  product(
      n, f, N,
      [&](int64_t i, int64_t r) { return gSc[i * N + r]; },
      [&](int64_t r, int64_t p) { return kf[r * f + p]; },
      [&](int64_t i, int64_t p, Acc u) {
        const int64_t at = i * f + p;
        gqf[at] = A[i] * PW[at] + (mom ? D[i] * PS[at] : Acc(0)) + u;
      });
  product(
      N, f, n,
      [&](int64_t r, int64_t i) { return gSc[i * N + r]; },
      [&](int64_t i, int64_t p) { return qf[i * f + p]; },
      [&](int64_t r, int64_t p, Acc u) { gkf[r * f + p] += u; });
  grid::barrier();

  // Clip, in reverse (fused_chunk.cpp clip_backward), one row per work item: c̄0 becomes Δ̄, c̄1 ḡ_y.
  if (tau > 0) {
    const Acc *kk = slice(x.kk, block, N), *dd = slice(x.dd, block, N), *eev = slice(x.eev, block, N),
              *gg = slice(x.gg, block, N), *s = slice(x.sv, block, N), *fv = slice(x.fv, block, N);
    MNEMO_FOR_LANES(r, N, lanes) {
      Acc *a0 = gc0 + r * hid, *a1 = gc1 + r * d, *gkr = gkf + r * f, *gg0 = gG0 + r * hid;
      const Acc *dl = Dl + r * hid, *e = E + r * d, *kr = kf + r * f, *g = G0 + r * hid;
      const Acc gfr = dot(a0, dl, hid) + dot(a1, e, d);
      const Acc gs2 = s[r] >= tau * tau ? -tau * gfr / (s[r] * sqrt_acc(s[r])) : Acc(0);
      const Acc fr = fv[r], x0 = gs2 * kk[r], x1 = gs2 * gg[r], xk = gs2 * dd[r], xg = gs2 * eev[r];
      for (int64_t j = 0; j < hid; ++j) a0[j] = a0[j] * fr + x0 * dl[j];
      for (int64_t j = 0; j < d; ++j) a1[j] = a1[j] * fr + x1 * e[j];
      for (int64_t j = 0; j < f; ++j) gkr[j] += xk * kr[j];
      for (int64_t j = 0; j < hid; ++j) gg0[j] += xg * g[j];
    }
    grid::barrier();
  }

  // Anchor pass, in reverse: R̄ = Δ̄ ⊙ GELU'(H0), ḡ_y += R̄ Â1ᵀ, v̄ = -ḡ_y, k̄ = ḡ_y (ℓ2), Â1̄ = [g_y | ḡ_y]ᵀ [R̄; G0]
  // (ḡ_y's half with ℓ2), H̄0 = (Ḡ0 + ḡ_y Â1 (ℓ2)) ⊙ GELU'(H0) + Δ̄ ⊙ R ⊙ GELU''(H0), φ̄k += H̄0 Â0, Â0̄ = H̄0ᵀ φk.
  MNEMO_FOR_LANES(i, N * hid, lanes) { gR[i] = gc0[i] * P0[i]; }
  grid::barrier();
  product(
      N, d, hid, [&](int64_t r, int64_t j) { return gR[r * hid + j]; },
      [&](int64_t j, int64_t p) { return A1[p * hid + j]; },
      [&](int64_t r, int64_t p, Acc u) {
        const int64_t at = r * d + p;
        const Acc ge = gc1[at] + u;
        gc1[at] = ge;
        gv[at] = -ge;
        if (l2) gk[at] = ge;
      });
  grid::barrier();
  product(
      d, hid, l2 ? 2 * N : N, [&](int64_t p, int64_t r) { return r < N ? E[r * d + p] : gc1[(r - N) * d + p]; },
      [&](int64_t r, int64_t j) { return r < N ? gR[r * hid + j] : G0[(r - N) * hid + j]; },
      [&](int64_t p, int64_t j, Acc u) { gA1[p * hid + j] = u; });
  if (l2) {
    product(
        N, hid, d, [&](int64_t r, int64_t p) { return gc1[r * d + p]; },
        [&](int64_t p, int64_t j) { return A1[p * hid + j]; },
        [&](int64_t r, int64_t j, Acc u) {
          const int64_t at = r * hid + j;
          gG0[at] = (gG0[at] + u) * P0[at] + gc0[at] * RP0d[at];  // H̄0
        });
  } else {
    MNEMO_FOR_LANES(at, N * hid, lanes) { gG0[at] = gG0[at] * P0[at] + gc0[at] * RP0d[at]; }
  }
  grid::barrier();
  auto gh0_at = [&](int64_t r, int64_t j) { return gG0[r * hid + j]; };
  product(
      N, f, hid, gh0_at, [&](int64_t j, int64_t p) { return A0[j * f + p]; },
      [&](int64_t r, int64_t p, Acc u) { gkf[r * f + p] += u; });
  product(
      hid, f, N,
      [&](int64_t j, int64_t r) { return gh0_at(r, j); },
      [&](int64_t r, int64_t p) { return kf[r * f + p]; },
      [&](int64_t j, int64_t p, Acc u) { gA0[j * f + p] = u; });
}

}  // namespace mnemo::deep_memory_kernel
