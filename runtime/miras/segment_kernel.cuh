// CUDA kernel of one Miras dual-form segment (fused_segment.h), forward and backward, as block code
// (runtime/kernels/block_grid.cuh): the same functions run as CUDA kernels (segment_kernel.cu) and, over a
// sequential grid, on the host (fused_segment_kernel.cpp), where the CPU tests check them against the node's tensor
// form in fp64 and fp32 (tests/test_cuda_kernels_miras.cpp). Moneta, Yaad and Memora (arXiv:2504.13173 §5) read and
// write their residual MLP + LayerNorm memory with it; fla has no counterpart.
//
// One block is one (batch, head); the caller runs the segments in order (the weights carry from one to the next).
// Per block, tokens as rows (n tokens, width d, hidden width hid), gates [n, G] with G = d (channel-wise) or 1
// (per head), anchor Â0 [hid, d], Â1 [d, hid], start weights W0 [hid, d], W1 [d, hid]:
//   anchor pass  H0 = K Â0ᵀ, G0 = GELU(H0), U0 = G0 Â1ᵀ, N0 = LN(U0) (scale s0), E = K + N0 ⊙ γ + β - V,
//                g_y = φ(E), Gu = (γ g_y - mean(γ g_y) - N0 mean(γ g_y N0)) / s0, R = Gu Â1, Dl = R ⊙ GELU'(H0)
//   decays       b = cumsum(log α) over the segment; e^{±b} per token and channel
//   read-out     A0 = (Q e^b)(K ⊙ η e^{-b})ᵀ ⊙ M,  h = (Q e^b) W0ᵀ - A0 Dl,  Ga = GELU(σ0 h),
//                S1 = Ga G0ᵀ ⊙ M,  uu = Ga W1ᵀ - S1 (Gu ⊙ η e^{-b}),  u = e^b ⊙ uu,  out = Q + LN(σ1 u) ⊙ γ + β
//   segment end  W0' = W0 ⊙ e^{b_n} (input axis) - Dlᵀ (K ⊙ η e^{b_n - b}),
//                W1' = e^{b_n} ⊙ W1 (output axis) - (Gu ⊙ η e^{b_n - b})ᵀ G0
// φ: ℓ2 (identity), ℓp (p E (E² + ε)^{(p-2)/2}) or Huber (the ℓ2 branch where RMS(E) ≤ δ, else δ E / sqrt(E² + ε));
// σ0, σ1: Moneta's frozen ℓq scales (1 otherwise). The backward is the adjoint of each line in reverse, as
// fused_segment.cpp and anchor_pass.cpp state it; it reads the forward's saved intermediates (SavedArgs).
//
// Every tensor is [blocks, rows, cols] contiguous in Acc (fp32 or fp64, docs/models.md#numerical-stability);
// γ, β are [H, d] (the block's head is block % H); σ0, σ1 are [blocks]. Each phase's work items are independent
// output elements, each computed whole by one lane (its sums in a fixed order), so a phase has no race and the
// host run computes every element as the device does; phases are separated by grid::barrier(). Intermediates live
// in a global workspace slice per block (forward_work / backward_work elements). The matrix products are the
// deep-memory kernel's Products (block_product, runtime/kernels/block_mma.cuh): an element a lane, or with
// Dims::bf16_products a 16×16 tile a warp on tensor cores (bf16 operands, fp32 sums).
#pragma once

#include <cmath>
#include <cstdint>

// The memory's own helpers: gelu, dot, slice, Products, block_sum, sqrt_acc.
#include "runtime/deep_memory/chunk_kernel.cuh"
#include "runtime/kernels/bf16.cuh"
#include "runtime/kernels/block_grid.cuh"

namespace mnemo::miras_kernel {

using deep_memory_kernel::block_sum;
using deep_memory_kernel::Gelu;
using deep_memory_kernel::gelu;
using deep_memory_kernel::Products;
using deep_memory_kernel::slice;
using deep_memory_kernel::sqrt_acc;
using grid::Lanes;

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0 && kThreads <= 32 * grid::kProductWarps, "block_product's warps");

enum Bias : int { kL2 = 0, kLp = 1, kHuber = 2 };

struct Dims {
  int64_t blocks;  // B·H
  int H, n, d, hid, G;
  int bias;     // Bias
  bool scaled;  // σ0, σ1 given (Moneta)
  double p, lp_eps, huber_eps, ln_eps;
  bool bf16_products;  // the products with bf16 operands and fp32 sums (Acc float; deep_memory_kernel::Dims)
};

MNEMO_HD int64_t forward_work(const Dims& z) { return static_cast<int64_t>(z.n) * z.hid; }
MNEMO_HD int64_t backward_work(const Dims& z) {
  const int64_t n = z.n, d = z.d, hid = z.hid;
  return 3 * n * hid + 8 * n * d + 2 * n * n + n * z.G + z.G + d + n + kThreads;
}

template <class Acc>
MNEMO_HD Acc pow_acc(Acc x, Acc y) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(Acc) == sizeof(float)) return powf(x, y);
  else return pow(x, y);
#else
  return std::pow(x, y);
#endif
}

// The forward's inputs (δ: Huber only; σ0, σ1: scaled only), outputs and saved intermediates.
template <class Acc>
struct ForwardArgs {
  Dims z;
  const Acc *q, *k, *v, *la, *eta, *delta, *gam, *bet, *A0, *A1, *W0, *W1, *sc0, *sc1;
  Acc *out, *w0, *w1;
  // saved: G0, P0 = GELU'(H0), P0d = GELU''(H0), R [n, hid]; N0, E, Gy = g_y, Gu [n, d]; s0, hub (Huber's switch)
  // [n]; b [n, G]; A0m = A0, S1 [n, n]; h, Ga, Pa = GELU'(σ0 h) [n, hid]; uu, nrm [n, d]; s (output LN scale) [n]
  Acc *G0, *P0, *P0d, *R, *N0, *E, *Gy, *Gu, *s0, *hub, *b, *A0m, *S1, *h, *Ga, *Pa, *uu, *nrm, *s;
  Acc* work;  // forward_work(z) per block
};

template <class Acc>
struct BackwardArgs {
  ForwardArgs<Acc> x;                // inputs and saved intermediates (outputs and x.work unused)
  const Acc *gout, *gw0, *gw1;       // output gradients (zeros where none)
  Acc *gq, *gk, *gv, *gla, *geta, *gdelta;  // [n, d] / [n, G] / [n]
  Acc *ggam, *gbet;                  // per block [d] (the caller sums over the batch)
  Acc *gA0, *gA1, *gW0, *gW1, *gsc0, *gsc1;
  Acc* work;  // backward_work(z) per block
};

// ---- forward ------------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void forward_block(const ForwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const Dims& z = a.z;
  const int64_t n = z.n, d = z.d, hid = z.hid, G = z.G, head = block % z.H;
  const bool cw = G != 1;  // channel-wise gates
  const Acc ln_eps = static_cast<Acc>(z.ln_eps);
  const Acc *q = slice(a.q, block, n * d), *k = slice(a.k, block, n * d), *v = slice(a.v, block, n * d),
            *la = slice(a.la, block, n * G), *eta = slice(a.eta, block, n * G),
            *delta = z.bias == kHuber ? slice(a.delta, block, n) : nullptr, *gam = a.gam + head * d,
            *bet = a.bet + head * d, *A0 = slice(a.A0, block, hid * d), *A1 = slice(a.A1, block, d * hid),
            *W0 = slice(a.W0, block, hid * d), *W1 = slice(a.W1, block, d * hid);
  const Acc sc0 = z.scaled ? *slice(a.sc0, block, 1) : Acc(1), sc1 = z.scaled ? *slice(a.sc1, block, 1) : Acc(1);
  Acc *G0 = slice(a.G0, block, n * hid), *P0 = slice(a.P0, block, n * hid), *P0d = slice(a.P0d, block, n * hid),
      *R = slice(a.R, block, n * hid), *N0 = slice(a.N0, block, n * d), *E = slice(a.E, block, n * d),
      *Gy = slice(a.Gy, block, n * d), *Gu = slice(a.Gu, block, n * d), *s0 = slice(a.s0, block, n),
      *hub = slice(a.hub, block, n), *b = slice(a.b, block, n * G), *A0m = slice(a.A0m, block, n * n),
      *S1 = slice(a.S1, block, n * n), *h = slice(a.h, block, n * hid), *Ga = slice(a.Ga, block, n * hid),
      *Pa = slice(a.Pa, block, n * hid), *uu = slice(a.uu, block, n * d), *nrm = slice(a.nrm, block, n * d),
      *s = slice(a.s, block, n);
  Acc* H0 = slice(a.work, block, forward_work(z));
  // Gate index of token t, channel j; e^{b} and e^{-b} there.
  auto gi = [&](int64_t t, int64_t j) { return cw ? t * d + j : t; };
  auto eb = [&](int64_t t, int64_t j) { return grid::exp_acc(b[gi(t, j)]); };
  auto ebi = [&](int64_t t, int64_t j) { return grid::exp_acc(-b[gi(t, j)]); };
  const Products<Acc> product{lanes, z.bf16_products};
  auto k_at = [&](int64_t t, int64_t j) { return k[t * d + j]; };

  // Anchor pass: H0 = K Â0ᵀ; GELU and its two derivatives; U0 = G0 Â1ᵀ (into N0); b = cumsum(log α). Both products
  // in Acc even with bf16 products: E = K + LN(U0) γ + β − V enters the bias's φ, and Huber's ℓ1 branch has the
  // slope δ ε / (E² + ε)^{3/2}, which multiplies E's error by up to δ / √ε (bf16 operands here gave gradient error
  // ratios of 0.1 on k and v at ε = 1e-3, against 1e-2 for the other biases).
  const Products<Acc> exact{lanes, false};
  exact(
      n, hid, d, k_at, [&](int64_t j, int64_t i) { return A0[i * d + j]; },
      [&](int64_t t, int64_t i, Acc x) { H0[t * hid + i] = x; });
  MNEMO_FOR_LANES(c, G, lanes) {
    Acc acc = 0;
    for (int64_t t = 0; t < n; ++t) b[t * G + c] = acc += la[t * G + c];
  }
  grid::barrier();
  MNEMO_FOR_LANES(i, n * hid, lanes) {
    const Gelu<Acc> g = gelu(H0[i]);
    G0[i] = g.value, P0[i] = g.grad, P0d[i] = g.second;
  }
  grid::barrier();
  exact(
      n, d, hid, [&](int64_t t, int64_t i) { return G0[t * hid + i]; },
      [&](int64_t i, int64_t j) { return A1[j * hid + i]; }, [&](int64_t t, int64_t j, Acc x) { N0[t * d + j] = x; });
  grid::barrier();
  // N0 = LN(U0), E, g_y = φ(E) and Gu, one token per work item.
  MNEMO_FOR_LANES(t, n, lanes) {
    Acc *u0 = N0 + t * d, *e = E + t * d, *gy = Gy + t * d, *gu = Gu + t * d;
    Acc m = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) m += u0[j];
    m /= Acc(d);
    for (int64_t j = 0; j < d; ++j) var += (u0[j] - m) * (u0[j] - m);
    const Acc sd = s0[t] = sqrt_acc(var / Acc(d) + ln_eps);
    Acc ms = 0;
    for (int64_t j = 0; j < d; ++j) {
      u0[j] = (u0[j] - m) / sd;
      e[j] = k[t * d + j] + u0[j] * gam[j] + bet[j] - v[t * d + j];
      ms += e[j] * e[j];
    }
    Acc sw = 1;
    if (z.bias == kHuber) sw = hub[t] = sqrt_acc(ms / Acc(d)) <= delta[t] ? Acc(1) : Acc(0);
    else hub[t] = 0;
    Acc mg = 0, mgn = 0;
    for (int64_t j = 0; j < d; ++j) {
      const Acc x = e[j];
      Acc g = x;
      if (z.bias == kLp) {
        const Acc pp = static_cast<Acc>(z.p), half_exponent = static_cast<Acc>((z.p - 2.0) / 2.0);
        g = pp * x * pow_acc<Acc>(x * x + static_cast<Acc>(z.lp_eps), half_exponent);
      } else if (z.bias == kHuber) {
        g = sw * x + (Acc(1) - sw) * delta[t] * x / sqrt_acc(x * x + static_cast<Acc>(z.huber_eps));
      }
      gy[j] = g;
      mg += g * gam[j];
      mgn += g * gam[j] * u0[j];
    }
    mg /= Acc(d), mgn /= Acc(d);
    for (int64_t j = 0; j < d; ++j) gu[j] = (gy[j] * gam[j] - mg - u0[j] * mgn) / sd;
  }
  grid::barrier();
  // R = Gu Â1, Dl = R ⊙ GELU'(H0) (Dl kept in H0's slot); A0 = (Q e^b)(K η e^{-b})ᵀ ⊙ M.
  Acc* Dl = H0;
  // Q e^b, K η e^{-b} and Gu η e^{-b}: the decayed rows the read-out's products take.
  auto qe = [&](int64_t t, int64_t j) { return q[t * d + j] * eb(t, j); };
  auto kei = [&](int64_t r, int64_t j) { return k[r * d + j] * eta[gi(r, j)] * ebi(r, j); };
  auto gei = [&](int64_t r, int64_t j) { return Gu[r * d + j] * eta[gi(r, j)] * ebi(r, j); };
  product(
      n, hid, d, [&](int64_t t, int64_t p) { return Gu[t * d + p]; },
      [&](int64_t p, int64_t i) { return A1[p * hid + i]; },
      [&](int64_t t, int64_t i, Acc r) {
        R[t * hid + i] = r;
        Dl[t * hid + i] = r * P0[t * hid + i];
      });
  product(
      n, n, d, qe, [&](int64_t j, int64_t r) { return kei(r, j); },
      [&](int64_t t, int64_t r, Acc x) { A0m[t * n + r] = r <= t ? x : Acc(0); });
  grid::barrier();
  // h = [Q e^b | −A0] [W0ᵀ; Dl] (one product over d + n), Ga = GELU(σ0 h).
  product(
      n, hid, d + n, [&](int64_t t, int64_t p) { return p < d ? qe(t, p) : -A0m[t * n + p - d]; },
      [&](int64_t p, int64_t i) { return p < d ? W0[i * d + p] : Dl[(p - d) * hid + i]; },
      [&](int64_t t, int64_t i, Acc x) {
        h[t * hid + i] = x;
        const Gelu<Acc> g = gelu(sc0 * x);
        Ga[t * hid + i] = g.value, Pa[t * hid + i] = g.grad;
      });
  grid::barrier();
  product(
      n, n, hid, [&](int64_t t, int64_t i) { return Ga[t * hid + i]; },
      [&](int64_t i, int64_t r) { return G0[r * hid + i]; },
      [&](int64_t t, int64_t r, Acc x) { S1[t * n + r] = r <= t ? x : Acc(0); });
  // Segment end (reads the anchor pass and the inputs only): Γ_end,s = exp(min(b_end - b_s, 0)),
  // W0' = W0 e^{b_end} − Dlᵀ (K η Γ), W1' = e^{b_end} W1 − (Gu η Γ)ᵀ G0.
  auto gamma_end = [&](int64_t r, int64_t j) {
    const Acc dif = b[gi(n - 1, j)] - b[gi(r, j)];
    return grid::exp_acc(dif < 0 ? dif : Acc(0));
  };
  Acc *w0 = slice(a.w0, block, hid * d), *w1 = slice(a.w1, block, d * hid);
  product(
      hid, d, n, [&](int64_t i, int64_t r) { return Dl[r * hid + i]; },
      [&](int64_t r, int64_t j) { return k[r * d + j] * eta[gi(r, j)] * gamma_end(r, j); },
      [&](int64_t i, int64_t j, Acc x) { w0[i * d + j] = W0[i * d + j] * grid::exp_acc(b[gi(n - 1, j)]) - x; });
  product(
      d, hid, n, [&](int64_t j, int64_t r) { return Gu[r * d + j] * eta[gi(r, j)] * gamma_end(r, j); },
      [&](int64_t r, int64_t i) { return G0[r * hid + i]; },
      [&](int64_t j, int64_t i, Acc x) { w1[j * hid + i] = grid::exp_acc(b[gi(n - 1, j)]) * W1[j * hid + i] - x; });
  grid::barrier();
  // uu = [Ga | −S1] [W1ᵀ; Gu η e^{-b}] (one product over hid + n).
  product(
      n, d, hid + n, [&](int64_t t, int64_t p) { return p < hid ? Ga[t * hid + p] : -S1[t * n + p - hid]; },
      [&](int64_t p, int64_t j) { return p < hid ? W1[j * hid + p] : gei(p - hid, j); },
      [&](int64_t t, int64_t j, Acc x) { uu[t * d + j] = x; });
  grid::barrier();
  // out = Q + LN(σ1 e^b ⊙ uu) ⊙ γ + β, one token per work item.
  Acc* out = slice(a.out, block, n * d);
  MNEMO_FOR_LANES(t, n, lanes) {
    Acc* c = nrm + t * d;
    Acc m = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) m += c[j] = sc1 * (eb(t, j) * uu[t * d + j]);
    m /= Acc(d);
    for (int64_t j = 0; j < d; ++j) var += (c[j] - m) * (c[j] - m);
    const Acc sd = s[t] = sqrt_acc(var / Acc(d) + ln_eps);
    for (int64_t j = 0; j < d; ++j) {
      c[j] = (c[j] - m) / sd;
      out[t * d + j] = q[t * d + j] + c[j] * gam[j] + bet[j];
    }
  }
}

// ---- backward -----------------------------------------------------------------------------------------------
template <class Acc>
MNEMO_HD void backward_block(const BackwardArgs<Acc>& a, int64_t block, void* /*shared*/, Lanes lanes) {
  const ForwardArgs<Acc>& x = a.x;
  const Dims& z = x.z;
  const int64_t n = z.n, d = z.d, hid = z.hid, G = z.G, head = block % z.H;
  const bool cw = G != 1;
  const Acc *q = slice(x.q, block, n * d), *k = slice(x.k, block, n * d), *eta = slice(x.eta, block, n * G),
            *delta = z.bias == kHuber ? slice(x.delta, block, n) : nullptr, *gam = x.gam + head * d,
            *A0 = slice(x.A0, block, hid * d), *A1 = slice(x.A1, block, d * hid), *W0 = slice(x.W0, block, hid * d),
            *W1 = slice(x.W1, block, d * hid);
  const Acc sc0 = z.scaled ? *slice(x.sc0, block, 1) : Acc(1), sc1 = z.scaled ? *slice(x.sc1, block, 1) : Acc(1);
  const Acc *G0 = slice(x.G0, block, n * hid), *P0 = slice(x.P0, block, n * hid),
            *P0d = slice(x.P0d, block, n * hid), *R = slice(x.R, block, n * hid), *N0 = slice(x.N0, block, n * d),
            *E = slice(x.E, block, n * d), *Gy = slice(x.Gy, block, n * d), *Gu = slice(x.Gu, block, n * d),
            *s0 = slice(x.s0, block, n), *hub = slice(x.hub, block, n), *b = slice(x.b, block, n * G),
            *A0m = slice(x.A0m, block, n * n), *S1 = slice(x.S1, block, n * n), *h = slice(x.h, block, n * hid),
            *Ga = slice(x.Ga, block, n * hid), *Pa = slice(x.Pa, block, n * hid), *uu = slice(x.uu, block, n * d),
            *nrm = slice(x.nrm, block, n * d), *s = slice(x.s, block, n);
  const Acc *gout = slice(a.gout, block, n * d), *gw0 = slice(a.gw0, block, hid * d),
            *gw1 = slice(a.gw1, block, d * hid);
  Acc *gq = slice(a.gq, block, n * d), *gk = slice(a.gk, block, n * d), *gv = slice(a.gv, block, n * d),
      *gla = slice(a.gla, block, n * G), *geta = slice(a.geta, block, n * G),
      *gdelta = z.bias == kHuber ? slice(a.gdelta, block, n) : nullptr, *ggam = slice(a.ggam, block, d),
      *gbet = slice(a.gbet, block, d), *gA0 = slice(a.gA0, block, hid * d), *gA1 = slice(a.gA1, block, d * hid),
      *gW0 = slice(a.gW0, block, hid * d), *gW1 = slice(a.gW1, block, d * hid);
  // Workspace: adjoints of Dl, G0 (then H0), h [n, hid]; Gu, K η, Gu η, e^b, e^{-b}, e^b ⊙ uu's input (guu),
  // a [n, d] scratch (T: b̄'s end terms, then γ̄'s), E [n, d]; S1, A0 [n, n]; b̄ [n, G]; b̄_end [G]; the weights'
  // ⟨W̄, W⟩ per input channel [d]; a per-token scratch [n]; the lanes' partial sums.
  Acc* w = slice(a.work, block, backward_work(z));
  Acc *gDl = w, *gG0 = gDl + n * hid, *gh = gG0 + n * hid, *gGu = gh + n * hid, *gke = gGu + n * d,
      *gge = gke + n * d, *geb = gge + n * d, *gebi = geb + n * d, *guu = gebi + n * d, *T = guu + n * d,
      *gE = T + n * d, *gS1 = gE + n * d, *gA0m = gS1 + n * n, *gb = gA0m + n * n, *gbl = gb + n * G,
      *gel = gbl + G, *row = gel + d, *red = row + n;
  auto gi = [&](int64_t t, int64_t j) { return cw ? t * d + j : t; };
  auto eb = [&](int64_t t, int64_t j) { return grid::exp_acc(b[gi(t, j)]); };
  auto ebi = [&](int64_t t, int64_t j) { return grid::exp_acc(-b[gi(t, j)]); };
  // Γ_end,t = exp(min(b_end - b_t, 0)) and whether b_end - b_t ≤ 0 (where the min passes the gradient).
  auto gl = [&](int64_t t, int64_t j) {
    const Acc dif = b[gi(n - 1, j)] - b[gi(t, j)];
    return grid::exp_acc(dif < 0 ? dif : Acc(0));
  };
  auto keep = [&](int64_t t, int64_t j) { return b[gi(n - 1, j)] - b[gi(t, j)] <= 0 ? Acc(1) : Acc(0); };
  const Products<Acc> product{lanes, z.bf16_products};
  auto k_at = [&](int64_t t, int64_t j) { return k[t * d + j]; };
  auto qe = [&](int64_t t, int64_t j) { return q[t * d + j] * eb(t, j); };
  auto kei = [&](int64_t r, int64_t j) { return k[r * d + j] * eta[gi(r, j)] * ebi(r, j); };
  auto dl = [&](int64_t t, int64_t i) { return R[t * hid + i] * P0[t * hid + i]; };  // Dl, from the saved R, P0

  // Segment end, in reverse: W̄ scaled by e^{b_end}; D̄l = -T0 W̄0ᵀ, Ḡ0 = -T1 W̄1 with T0 = K η Γ, T1 = Gu η Γ;
  // T̄0 = -Dl W̄0, T̄1 = -G0 W̄1ᵀ give k̄η, ḡuη and the Γ term of b̄ (into T); ⟨W̄, W⟩ per input channel (gel).
  // Output LN, in reverse: ū = σ1 LN-adjoint(ō γ) per token, then guu = ū e^b, ē^b = ū uu; γ̄, β̄ per channel.
  MNEMO_FOR_LANES(item, hid * d, lanes) gW0[item] = gw0[item] * eb(n - 1, item % d);
  MNEMO_FOR_LANES(item, d * hid, lanes) gW1[item] = eb(n - 1, item / hid) * gw1[item];
  product(
      n, hid, d, [&](int64_t t, int64_t j) { return k[t * d + j] * eta[gi(t, j)] * gl(t, j); },
      [&](int64_t j, int64_t i) { return gw0[i * d + j]; },
      [&](int64_t t, int64_t i, Acc x) { gDl[t * hid + i] = -x; });
  product(
      n, hid, d, [&](int64_t t, int64_t j) { return Gu[t * d + j] * eta[gi(t, j)] * gl(t, j); },
      [&](int64_t j, int64_t i) { return gw1[j * hid + i]; },
      [&](int64_t t, int64_t i, Acc x) { gG0[t * hid + i] = -x; });
  // T̄0 = −Dl W̄0 and T̄1 = −G0 W̄1ᵀ into gke and gge (their gates below).
  product(
      n, d, hid, dl, [&](int64_t i, int64_t j) { return gw0[i * d + j]; },
      [&](int64_t t, int64_t j, Acc x) { gke[t * d + j] = -x; });
  product(
      n, d, hid, [&](int64_t t, int64_t i) { return G0[t * hid + i]; },
      [&](int64_t i, int64_t j) { return gw1[j * hid + i]; },
      [&](int64_t t, int64_t j, Acc x) { gge[t * d + j] = -x; });
  MNEMO_FOR_LANES(j, d, lanes) {
    Acc u = 0;
    for (int64_t i = 0; i < hid; ++i) u += gw0[i * d + j] * W0[i * d + j];
    for (int64_t i = 0; i < hid; ++i) u += gw1[j * hid + i] * W1[j * hid + i];
    gel[j] = u;
    Acc sg = 0, sb = 0;
    for (int64_t t = 0; t < n; ++t) sg += gout[t * d + j] * nrm[t * d + j], sb += gout[t * d + j];
    ggam[j] = sg, gbet[j] = sb;
  }
  MNEMO_FOR_LANES(t, n, lanes) {
    const Acc *go = gout + t * d, *nr = nrm + t * d;
    Acc m = 0, mn = 0;
    for (int64_t j = 0; j < d; ++j) m += go[j] * gam[j], mn += go[j] * gam[j] * nr[j];
    m /= Acc(d), mn /= Acc(d);
    Acc su = 0;
    for (int64_t j = 0; j < d; ++j) {
      const Acc gus = (go[j] * gam[j] - m - nr[j] * mn) / s[t];
      su += gus * (eb(t, j) * uu[t * d + j]);
      const Acc gu = gus * sc1;
      guu[t * d + j] = gu * eb(t, j);
      geb[t * d + j] = gu * uu[t * d + j];
    }
    row[t] = su;
  }
  grid::barrier();
  MNEMO_FOR_LANES(item, n * d, lanes) {
    const int64_t t = item / d, j = item % d;
    const Acc t0 = gke[item], t1 = gge[item], g = gl(t, j), ke = k[item] * eta[gi(t, j)],
              ge = Gu[item] * eta[gi(t, j)];
    gke[item] = t0 * g;
    gge[item] = t1 * g;
    T[item] = (t0 * ke + t1 * ge) * g * keep(t, j);
  }
  grid::barrier();
  // b̄ from the segment end: b̄_end = to_gate(gel e^{b_end}) + Σ_t to_gate(T), b̄_t = -to_gate(T_t); σ̄1.
  MNEMO_FOR_LANES(c, G, lanes) {
    Acc be = 0;
    for (int64_t j = cw ? c : 0; j < (cw ? c + 1 : d); ++j) be += gel[j] * eb(n - 1, j);
    for (int64_t t = 0; t < n; ++t) {
      Acc bt = 0;
      for (int64_t j = cw ? c : 0; j < (cw ? c + 1 : d); ++j) bt += T[t * d + j];
      gb[t * G + c] = -bt;
      be += bt;
    }
    gbl[c] = be;
  }
  if (z.scaled && lanes.lane == 0) {
    Acc su = 0;
    for (int64_t t = 0; t < n; ++t) su += row[t];
    *slice(a.gsc1, block, 1) = su;
  }
  // uu = Ga W1ᵀ - S1 gei:  S̄1 = -guu geiᵀ ⊙ M,  ḡei = -S1ᵀ guu → ḡe += ḡei e^{-b}, ē^{-b} = ḡei ge.
  auto guu_at = [&](int64_t t, int64_t j) { return guu[t * d + j]; };
  product(
      n, n, d, guu_at, [&](int64_t j, int64_t r) { return Gu[r * d + j] * eta[gi(r, j)] * ebi(r, j); },
      [&](int64_t t, int64_t r, Acc x) { gS1[t * n + r] = r <= t ? -x : Acc(0); });
  product(
      n, d, n, [&](int64_t r, int64_t t) { return S1[t * n + r]; }, guu_at,  // S1 is zero above the diagonal
      [&](int64_t r, int64_t j, Acc x) {
        const int64_t item = r * d + j;
        gge[item] -= x * ebi(r, j);
        gebi[item] = -x * (Gu[item] * eta[gi(r, j)]);
      });
  grid::barrier();
  // Ḡa = [guu | S̄1] [W1; G0] (one product over d + n), h̄ = Ḡa ⊙ GELU'(σ0 h) (σ0 applied below); W̄1 += guuᵀ Ga;
  // Ḡ0 += S̄1ᵀ Ga.
  auto ga_at = [&](int64_t t, int64_t i) { return Ga[t * hid + i]; };
  product(
      n, hid, d + n, [&](int64_t t, int64_t p) { return p < d ? guu[t * d + p] : gS1[t * n + p - d]; },
      [&](int64_t p, int64_t i) { return p < d ? W1[p * hid + i] : G0[(p - d) * hid + i]; },
      [&](int64_t t, int64_t i, Acc g) { gh[t * hid + i] = g * Pa[t * hid + i]; });
  product(
      d, hid, n, [&](int64_t j, int64_t t) { return guu[t * d + j]; }, ga_at,
      [&](int64_t j, int64_t i, Acc x) { gW1[j * hid + i] += x; });
  product(
      n, hid, n, [&](int64_t r, int64_t t) { return gS1[t * n + r]; }, ga_at,  // S̄1 is zero above the diagonal
      [&](int64_t r, int64_t i, Acc x) { gG0[r * hid + i] += x; });
  grid::barrier();
  if (z.scaled) {  // σ̄0 = Σ h̄ h, then h̄ ← σ0 h̄
    const Acc sg = block_sum<Acc>(lanes, red, n * hid, [&](int64_t i) { return gh[i] * h[i]; });
    if (lanes.lane == 0) *slice(a.gsc0, block, 1) = sg;
    MNEMO_FOR_LANES(i, n * hid, lanes) gh[i] *= sc0;
    grid::barrier();
  }
  // h = Qe W0ᵀ - A0 Dl:  Ā0 = -h̄ Dlᵀ ⊙ M,  D̄l -= A0ᵀ h̄,  W̄0 += h̄ᵀ Qe.
  auto gh_at = [&](int64_t t, int64_t i) { return gh[t * hid + i]; };
  product(
      n, n, hid, gh_at, [&](int64_t i, int64_t r) { return dl(r, i); },
      [&](int64_t t, int64_t r, Acc x) { gA0m[t * n + r] = r <= t ? -x : Acc(0); });
  product(
      n, hid, n, [&](int64_t r, int64_t t) { return A0m[t * n + r]; }, gh_at,  // A0 is zero above the diagonal
      [&](int64_t r, int64_t i, Acc x) { gDl[r * hid + i] -= x; });
  product(
      hid, d, n, [&](int64_t i, int64_t t) { return gh[t * hid + i]; }, qe,
      [&](int64_t i, int64_t j, Acc x) { gW0[i * d + j] += x; });
  grid::barrier();
  // Q̄e = [h̄ | Ā0] [W0; kei] → q̄ = ō + Q̄e e^b, ē^b += Q̄e q;  k̄ei = Ā0ᵀ Qe → k̄e += k̄ei e^{-b},
  // ē^{-b} += k̄ei ke.
  product(
      n, d, hid + n, [&](int64_t t, int64_t p) { return p < hid ? gh[t * hid + p] : gA0m[t * n + p - hid]; },
      [&](int64_t p, int64_t j) { return p < hid ? W0[p * d + j] : kei(p - hid, j); },
      [&](int64_t t, int64_t j, Acc gQe) {
        const int64_t item = t * d + j;
        gq[item] = gout[item] + gQe * eb(t, j);
        geb[item] += gQe * q[item];
      });
  product(
      n, d, n, [&](int64_t t, int64_t u) { return gA0m[u * n + t]; }, qe,  // Ā0 is zero above the diagonal
      [&](int64_t t, int64_t j, Acc gkei) {
        const int64_t item = t * d + j;
        gke[item] += gkei * ebi(t, j);
        gebi[item] += gkei * (k[item] * eta[gi(t, j)]);
      });
  grid::barrier();
  // Gates, one token per work item: ḡu = ḡe η, k̄ = k̄e η, η̄ = to_gate(ḡe Gu + k̄e K),
  // b̄ += to_gate(ē^b e^b - ē^{-b} e^{-b}).
  MNEMO_FOR_LANES(t, n, lanes) {
    if (!cw) geta[t] = 0;
    Acc bsum = 0;
    for (int64_t j = 0; j < d; ++j) {
      const int64_t e = t * d + j;
      const Acc et = eta[gi(t, j)];
      gGu[e] = gge[e] * et;
      gk[e] = gke[e] * et;
      const Acc ge = gge[e] * Gu[e] + gke[e] * k[e], gbt = geb[e] * eb(t, j) - gebi[e] * ebi(t, j);
      if (cw) {
        geta[e] = ge;
        gb[e] += gbt;
      } else {
        geta[t] += ge;
        bsum += gbt;
      }
    }
    if (!cw) gb[t] += bsum;
  }
  grid::barrier();
  // log ᾱ = reverse cumsum of b̄ (b_end's adjoint on the last token); anchor pass in reverse from here:
  // R̄ = D̄l ⊙ P0, ḡu += R̄ Â1ᵀ, Â1̄ = Guᵀ R̄.
  MNEMO_FOR_LANES(c, G, lanes) {
    Acc acc = gbl[c];
    for (int64_t t = n - 1; t >= 0; --t) gla[t * G + c] = acc += gb[t * G + c];
  }
  auto gr = [&](int64_t t, int64_t i) { return gDl[t * hid + i] * P0[t * hid + i]; };  // R̄
  product(
      n, d, hid, gr, [&](int64_t i, int64_t p) { return A1[p * hid + i]; },
      [&](int64_t t, int64_t p, Acc x) { gGu[t * d + p] += x; });
  product(
      d, hid, n, [&](int64_t p, int64_t t) { return Gu[t * d + p]; }, gr,
      [&](int64_t p, int64_t i, Acc x) { gA1[p * hid + i] = x; });
  grid::barrier();
  // Gu = LN-adjoint of γ g_y at N0, φ, E = K + N0 γ + β - V and N0 = LN(U0), in reverse, one token per work item;
  // Ū0 goes into gGu's row, the γ̄ terms into T, Ē into gE.
  MNEMO_FOR_LANES(t, n, lanes) {
    Acc *gu = gGu + t * d, *tg = T + t * d, *ge = gE + t * d;
    const Acc *gy = Gy + t * d, *n0 = N0 + t * d, *e = E + t * d;
    const Acc sd = s0[t];
    Acc mz = 0, mzn = 0, mhn = 0, gs = 0;
    for (int64_t j = 0; j < d; ++j) {
      const Acc gz = gu[j] / sd;
      mz += gz, mzn += gz * n0[j], mhn += gy[j] * gam[j] * n0[j];
      gs -= gu[j] * Gu[t * d + j];
    }
    mz /= Acc(d), mzn /= Acc(d), mhn /= Acc(d);
    gs /= sd;
    Acc gd = 0, sn = 0;
    for (int64_t j = 0; j < d; ++j) {
      const Acc gz = gu[j] / sd;
      const Acc ggh = gz - mz - n0[j] * mzn;
      Acc gn = -mhn * gz - mzn * (gy[j] * gam[j]);
      const Acc ggy = ggh * gam[j];
      Acc g = ggy;  // Ē
      if (z.bias == kLp) {
        const Acc pp = static_cast<Acc>(z.p), wv = e[j] * e[j] + static_cast<Acc>(z.lp_eps);
        g = ggy * pp * pow_acc<Acc>(wv, static_cast<Acc>((z.p - 4.0) / 2.0)) * (wv + (pp - Acc(2)) * e[j] * e[j]);
      } else if (z.bias == kHuber) {
        const Acc wv = e[j] * e[j] + static_cast<Acc>(z.huber_eps), sw = hub[t];
        g = ggy * (sw + (Acc(1) - sw) * delta[t] * static_cast<Acc>(z.huber_eps) / (wv * sqrt_acc(wv)));
        gd += ggy * (Acc(1) - sw) * e[j] / sqrt_acc(wv);
      }
      ge[j] = g;
      gv[t * d + j] = -g;
      gk[t * d + j] += g;
      gn += g * gam[j];
      tg[j] = ggh * gy[j] + g * n0[j];
      gu[j] = gn;  // N̄0 for now
      sn += gn * n0[j];
    }
    if (gdelta) gdelta[t] = gd;
    const Acc gst = gs - sn / sd;
    Acc mc = 0;
    for (int64_t j = 0; j < d; ++j) mc += gu[j] = gu[j] / sd + gst * n0[j] / Acc(d);
    mc /= Acc(d);
    for (int64_t j = 0; j < d; ++j) gu[j] -= mc;  // Ū0
  }
  grid::barrier();
  // γ̄, β̄ per channel; Ḡ0 += Ū0 Â1, H̄0 = Ḡ0 ⊙ GELU'(H0) + D̄l ⊙ R ⊙ GELU''(H0) (into gG0); Â1̄ += Ū0ᵀ G0.
  MNEMO_FOR_LANES(j, d, lanes) {
    Acc sg = 0, sb = 0;
    for (int64_t t = 0; t < n; ++t) sg += T[t * d + j], sb += gE[t * d + j];
    ggam[j] += sg, gbet[j] += sb;
  }
  product(
      n, hid, d, [&](int64_t t, int64_t p) { return gGu[t * d + p]; },
      [&](int64_t p, int64_t i) { return A1[p * hid + i]; },
      [&](int64_t t, int64_t i, Acc x) {
        const int64_t item = t * hid + i;
        gG0[item] = (gG0[item] + x) * P0[item] + gDl[item] * (R[item] * P0d[item]);
      });
  product(
      d, hid, n, [&](int64_t p, int64_t t) { return gGu[t * d + p]; },
      [&](int64_t t, int64_t i) { return G0[t * hid + i]; },
      [&](int64_t p, int64_t i, Acc x) { gA1[p * hid + i] += x; });
  grid::barrier();
  // K̄ += H̄0 Â0, Â0̄ = H̄0ᵀ K.
  auto gh0 = [&](int64_t t, int64_t i) { return gG0[t * hid + i]; };
  product(
      n, d, hid, gh0, [&](int64_t i, int64_t j) { return A0[i * d + j]; },
      [&](int64_t t, int64_t j, Acc x) { gk[t * d + j] += x; });
  product(
      hid, d, n, [&](int64_t i, int64_t t) { return gh0(t, i); }, k_at,
      [&](int64_t i, int64_t j, Acc x) { gA0[i * d + j] = x; });
}

}  // namespace mnemo::miras_kernel
