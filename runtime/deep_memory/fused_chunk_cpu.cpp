// The CPU form of the fused deep-memory chunk node (fused_chunk_forms.h): the tensor form's equations
// (fused_chunk.h, fused_chunk.cpp) for one (batch, head) at a time, as row loops over contiguous scratch and direct
// GEMMs (fused_cpu::gemm: the process's BLAS) with their α/β doing the scalings and accumulations. Per (b, h),
// tokens as rows: n read, N ≥ n terms written; widths d (q, k, v), f (φq, φk), hid (the MLP's hidden layer).
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/deep_memory/fused_chunk_forms.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_cpu_math.h"

namespace mnemo::fused_chunk_forms {

namespace {

using fused_cpu::dot;
using fused_cpu::gelu_rows;
using fused_cpu::gemm;

// The (b, h) matrix of a [B, H, R, C] tensor with a unit last stride (rows `ld` apart); of a [B, H, R] vector or a
// [B, H] scalar (unit stride along R).
template <typename T>
struct Part {
  T* p = nullptr;
  int64_t s0 = 0, s1 = 0, ld = 0;
  Part() = default;
  explicit Part(const Tensor& t)
      : p(t.defined() && t.numel() > 0 ? t.data_ptr<T>() : nullptr),
        s0(t.defined() && t.dim() > 0 ? t.stride(0) : 0),
        s1(t.defined() && t.dim() > 1 ? t.stride(1) : 0),
        ld(t.defined() && t.dim() > 3 ? t.stride(2) : 0) {}
  T* at(int64_t b, int64_t h) const { return p ? p + b * s0 + h * s1 : nullptr; }
};

struct Dims {
  int64_t B, H, n, N, d, f, hid;
  bool mom, l2;
};

template <typename T>
using Buf = std::vector<T>;

// ---- forward ----------------------------------------------------------------------------------------------
template <typename T>
struct FwdParts {
  Part<T> q, qf, k, kf, v, W0, W1, S0, S1, A0, A1, A, D, C, ae, de, ce, pe, ee;         // inputs
  Part<T> y, w0, w1, s0, s1, P0, G0, E, RP0d, Dl, c0, c1, QK, X1, M1, GG, Ga, Pa;         // outputs, saved
  Part<T> kk, dd, eev, gg, sv, fv;                                                       // clip (τ > 0)
};

template <typename T>
MNEMO_INLINE void forward_head(const Dims& z, const FwdParts<T>& P, int64_t b, int64_t h, T tau, Buf<T>& scratch) {
  const int64_t n = z.n, N = z.N, d = z.d, f = z.f, hid = z.hid;
  scratch.resize(std::max(N, n) * hid * 3 + n * N + n * f + N * std::max(f, d));
  T *H0 = scratch.data(), *pdf = H0 + std::max(N, n) * hid, *second = pdf + std::max(N, n) * hid;
  T *CX = second + std::max(N, n) * hid, *xs = CX + n * N, *rs = xs + n * f;  // C ⊙ (x rᵀ), scaled x, scaled rows
  const T *q = P.q.at(b, h), *qf = P.qf.at(b, h), *k = P.k.at(b, h), *kf = P.kf.at(b, h), *v = P.v.at(b, h);
  const T *W0 = P.W0.at(b, h), *W1 = P.W1.at(b, h), *A0 = P.A0.at(b, h), *A1 = P.A1.at(b, h);
  const T *A = P.A.at(b, h), *C = P.C.at(b, h), *ce = P.ce.at(b, h);
  const int64_t lq = P.q.ld, lqf = P.qf.ld, lk = P.k.ld, lkf = P.kf.ld, lv = P.v.ld;
  const int64_t lW0 = P.W0.ld, lW1 = P.W1.ld, lA0 = P.A0.ld, lA1 = P.A1.ld, lC = P.C.ld;
  T *G0 = P.G0.at(b, h), *P0 = P.P0.at(b, h), *E = P.E.at(b, h), *RP0d = P.RP0d.at(b, h), *Dl = P.Dl.at(b, h);
  // Anchor pass: H0 = φk Â0ᵀ, G0 = GELU(H0), g_y = k + G0 Â1ᵀ - v (ℓ2) or -v, R = g_y Â1, Δ = R ⊙ GELU'(H0).
  gemm<T>(false, true, N, hid, f, 1, kf, lkf, A0, lA0, 0, H0, hid);
  gelu_rows(H0, G0, P0, pdf, second, N * hid);
  if (z.l2) gemm<T>(false, true, N, d, hid, 1, G0, hid, A1, lA1, 0, E, d);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < d; ++j) E[r * d + j] = (z.l2 ? E[r * d + j] + k[r * lk + j] : T(0)) - v[r * lv + j];
  gemm<T>(false, false, N, hid, d, 1, E, d, A1, lA1, 0, RP0d, hid);  // R
  for (int64_t i = 0; i < N * hid; ++i) {
    Dl[i] = RP0d[i] * P0[i];
    RP0d[i] *= second[i];
  }
  // Clip (memory.h clip_grad_terms): c0 = f Δ, c1 = f g_y, f = τ / sqrt(max(τ², |Δ|²|φk|² + |g_y|²|G0|²)).
  T *c0 = P.c0.at(b, h), *c1 = P.c1.at(b, h);
  if (tau > 0) {
    T *kk = P.kk.at(b, h), *dd = P.dd.at(b, h), *ee = P.eev.at(b, h), *gg = P.gg.at(b, h), *s = P.sv.at(b, h),
      *fv = P.fv.at(b, h);
    for (int64_t r = 0; r < N; ++r) {
      const T *kr = kf + r * lkf, *dl = Dl + r * hid, *e = E + r * d, *g = G0 + r * hid;
      kk[r] = dot(kr, kr, f), dd[r] = dot(dl, dl, hid), ee[r] = dot(e, e, d), gg[r] = dot(g, g, hid);
      s[r] = dd[r] * kk[r] + ee[r] * gg[r];
      const T fr = fv[r] = tau / std::sqrt(std::max(tau * tau, s[r]));
      for (int64_t j = 0; j < hid; ++j) c0[r * hid + j] = dl[j] * fr;
      for (int64_t j = 0; j < d; ++j) c1[r * d + j] = e[j] * fr;
    }
  }
  // Read-out: H = (A⊙φq) W0ᵀ + (D⊙φq) S0ᵀ - (C ⊙ φq φkᵀ) c0, Ga = GELU(H),
  //           y = q + A⊙(Ga W1ᵀ) + D⊙(Ga S1ᵀ) - (C ⊙ Ga G0ᵀ) c1.
  T *QK = P.QK.at(b, h), *Ga = P.Ga.at(b, h), *Pa = P.Pa.at(b, h), *X1 = P.X1.at(b, h), *GG = P.GG.at(b, h);
  T *Hm = H0;  // H0 is no longer needed
  gemm<T>(false, true, n, N, f, 1, qf, lqf, kf, lkf, 0, QK, N);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) xs[i * f + j] = A[i] * qf[i * lqf + j];
  gemm<T>(false, true, n, hid, f, 1, xs, f, W0, lW0, 0, Hm, hid);
  if (z.mom) {
    const T* D = P.D.at(b, h);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < f; ++j) xs[i * f + j] = D[i] * qf[i * lqf + j];
    gemm<T>(false, true, n, hid, f, 1, xs, f, P.S0.at(b, h), P.S0.ld, 1, Hm, hid);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) CX[i * N + j] = C[i * lC + j] * QK[i * N + j];
  gemm<T>(false, false, n, hid, N, -1, CX, N, c0, hid, 1, Hm, hid);
  gelu_rows(Hm, Ga, Pa, pdf, static_cast<T*>(nullptr), n * hid);
  gemm<T>(false, true, n, d, hid, 1, Ga, hid, W1, lW1, 0, X1, d);
  gemm<T>(false, true, n, N, hid, 1, Ga, hid, G0, hid, 0, GG, N);
  T* M1 = z.mom ? P.M1.at(b, h) : nullptr;
  if (z.mom) gemm<T>(false, true, n, d, hid, 1, Ga, hid, P.S1.at(b, h), P.S1.ld, 0, M1, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) CX[i * N + j] = C[i * lC + j] * GG[i * N + j];
  T* y = P.y.at(b, h);
  gemm<T>(false, false, n, d, N, -1, CX, N, c1, d, 0, y, d);
  for (int64_t i = 0; i < n; ++i) {
    const T Di = z.mom ? P.D.at(b, h)[i] : T(0);
    for (int64_t j = 0; j < d; ++j)
      y[i * d + j] += q[i * lq + j] + A[i] * X1[i * d + j] + (z.mom ? Di * M1[i * d + j] : T(0));
  }
  // Chunk end: W0' = a W0 + d S0 - c0ᵀ (c_end ⊙ φk), W1' = a W1 + d S1 - (c_end ⊙ c1)ᵀ G0,
  //            S0' = p S0 - c0ᵀ (e_end ⊙ φk),        S1' = p S1 - (e_end ⊙ c1)ᵀ G0.
  const T a_end = *P.ae.at(b, h), d_end = z.mom ? *P.de.at(b, h) : T(0);
  auto combine = [&](T* out, const T* W, int64_t lW, const T* S, int64_t lS, T wa, T sa, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out[i * cols + j] = (W ? wa * W[i * lW + j] : T(0)) + (S ? sa * S[i * lS + j] : T(0));
  };
  auto chunk_end = [&](T* w0, T* w1, const T* scale) {  // w0 -= c0ᵀ (scale ⊙ φk), w1 -= (scale ⊙ c1)ᵀ G0
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < f; ++j) rs[r * f + j] = scale[r] * kf[r * lkf + j];
    gemm<T>(true, false, hid, f, N, -1, c0, hid, rs, f, 1, w0, f);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < d; ++j) rs[r * d + j] = scale[r] * c1[r * d + j];
    gemm<T>(true, false, d, hid, N, -1, rs, d, G0, hid, 1, w1, hid);
  };
  const T *S0 = z.mom ? P.S0.at(b, h) : nullptr, *S1 = z.mom ? P.S1.at(b, h) : nullptr;
  combine(P.w0.at(b, h), W0, lW0, S0, P.S0.ld, a_end, d_end, hid, f);
  combine(P.w1.at(b, h), W1, lW1, S1, P.S1.ld, a_end, d_end, d, hid);
  chunk_end(P.w0.at(b, h), P.w1.at(b, h), ce);
  if (z.mom) {
    const T p_end = *P.pe.at(b, h);
    combine(P.s0.at(b, h), nullptr, 0, S0, P.S0.ld, 0, p_end, hid, f);
    combine(P.s1.at(b, h), nullptr, 0, S1, P.S1.ld, 0, p_end, d, hid);
    chunk_end(P.s0.at(b, h), P.s1.at(b, h), P.ee.at(b, h));
  }
}

// Every (b, h) in turn with one scratch buffer; `head` is inlined into the SIMD clones below.
template <typename T, typename Head>
MNEMO_INLINE void each_head(const Dims& z, Head&& head) {
  Buf<T> scratch;
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t h = 0; h < z.H; ++h) head(b, h, scratch);
}
MNEMO_SIMD_CLONES void forward_f(const Dims& z, const FwdParts<float>& P, float tau) {
  each_head<float>(z, [&](int64_t b, int64_t h, Buf<float>& s) { forward_head(z, P, b, h, tau, s); });
}
MNEMO_SIMD_CLONES void forward_d(const Dims& z, const FwdParts<double>& P, double tau) {
  each_head<double>(z, [&](int64_t b, int64_t h, Buf<double>& s) { forward_head(z, P, b, h, tau, s); });
}

// ---- backward ---------------------------------------------------------------------------------------------
template <typename T>
struct BwdParts {
  FwdParts<T> x;                                   // inputs and saved tensors (outputs unused)
  Part<T> gy, gw0, gw1, gs0, gs1;                  // output gradients (null: zero)
  Part<T> gqf, gk, gkf, gv, gW0, gW1, gS0, gS1, gA0, gA1, gA, gD, gC, gae, gde, gce, gpe, gee;  // input gradients
};

template <typename T>
MNEMO_INLINE T frob(const T* a, int64_t la, const T* b, int64_t lb, int64_t rows, int64_t cols) {  // ⟨a, b⟩
  T s = 0;
  if (!a || !b) return s;
  for (int64_t i = 0; i < rows; ++i) s += dot(a + i * la, b + i * lb, cols);
  return s;
}

// One chunk-end term W -= aᵀ diag(s) b in reverse, with x [N, wx] the narrower and y [N, wy] the wider of a and b:
// W0 -= c0ᵀ diag(s) φk (y = c0, x = φk, op(W̄) = W̄0), W1 -= c1ᵀ diag(s) G0 (y = G0, x = c1, op(W̄) = W̄1ᵀ: trans).
// With Z = y op(W̄) [N, wx]:  s̄ -= rowsum(Z ⊙ x),  x̄ -= s ⊙ Z,  ȳ -= (s ⊙ x) op(W̄)ᵀ.
template <typename T>
MNEMO_INLINE void end_term_backward(int64_t N, bool trans, const T* y, int64_t ly, int64_t wy, const T* x, int64_t lx,
                                    int64_t wx, const T* gW, int64_t lgW, const T* s, T* gs, T* gx, int64_t lgx, T* gy,
                                    int64_t lgy, T* Z, T* sx) {
  gemm<T>(false, trans, N, wx, wy, 1, y, ly, gW, lgW, 0, Z, wx);
  for (int64_t r = 0; r < N; ++r) {
    gs[r] -= dot(Z + r * wx, x + r * lx, wx);
    for (int64_t j = 0; j < wx; ++j) {
      gx[r * lgx + j] -= s[r] * Z[r * wx + j];
      sx[r * wx + j] = s[r] * x[r * lx + j];
    }
  }
  gemm<T>(false, !trans, N, wy, wx, -1, sx, wx, gW, lgW, 1, gy, lgy);
}

// The read-out's score term out -= (C ⊙ x rᵀ) c of one layer (XR = x rᵀ from the forward), in reverse, given ō
// [n, wo]: S̄c = -ō cᵀ, C̄ += S̄c ⊙ XR, S̄c' = S̄c ⊙ C, c̄ -= (C ⊙ XR)ᵀ ō, x̄ += S̄c' r, r̄ += S̄c'ᵀ x (x, r: [·, wx]).
template <typename T>
MNEMO_INLINE void score_backward(int64_t n, int64_t N, int64_t wo, int64_t wx, const T* go, int64_t lgo, const T* c,
                                 const T* XR, const T* C, int64_t lC, const T* x, int64_t lx, const T* r, int64_t lr,
                                 T* gC, T* gc, T* gx, int64_t lgx, T* gr, int64_t lgr, T* gSc, T* CX) {
  gemm<T>(false, true, n, N, wo, -1, go, lgo, c, wo, 0, gSc, N);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const T cij = C[i * lC + j];
      gC[i * N + j] += gSc[i * N + j] * XR[i * N + j];
      gSc[i * N + j] *= cij;
      CX[i * N + j] = cij * XR[i * N + j];
    }
  gemm<T>(true, false, N, wo, n, -1, CX, N, go, lgo, 1, gc, wo);
  gemm<T>(false, false, n, wx, N, 1, gSc, N, r, lr, 1, gx, lgx);
  gemm<T>(true, false, N, wx, n, 1, gSc, N, x, lx, 1, gr, lgr);
}

template <typename T>
MNEMO_INLINE void backward_head(const Dims& z, const BwdParts<T>& G, int64_t b, int64_t h, T tau, Buf<T>& scratch) {
  const FwdParts<T>& P = G.x;
  const int64_t n = z.n, N = z.N, d = z.d, f = z.f, hid = z.hid;
  scratch.resize(N * hid * 3 + n * hid + 2 * n * N + std::max(N, n) * std::max(f, d) * 2);
  T *gc0 = scratch.data(), *gG0 = gc0 + N * hid, *gR = gG0 + N * hid, *gGa = gR + N * hid, *gSc = gGa + n * hid;
  T *CX = gSc + n * N, *ta = CX + n * N, *tb = ta + std::max(N, n) * std::max(f, d);
  Buf<T> gc1v(N * d);
  T* gc1 = gc1v.data();
  const T *qf = P.qf.at(b, h), *kf = P.kf.at(b, h), *W0 = P.W0.at(b, h), *W1 = P.W1.at(b, h);
  const T *A0 = P.A0.at(b, h), *A1 = P.A1.at(b, h), *A = P.A.at(b, h), *C = P.C.at(b, h), *ce = P.ce.at(b, h);
  const T *S0 = z.mom ? P.S0.at(b, h) : nullptr, *S1 = z.mom ? P.S1.at(b, h) : nullptr;
  const T *D = z.mom ? P.D.at(b, h) : nullptr, *ee = z.mom ? P.ee.at(b, h) : nullptr;
  const int64_t lqf = P.qf.ld, lkf = P.kf.ld, lW0 = P.W0.ld, lW1 = P.W1.ld, lS0 = P.S0.ld, lS1 = P.S1.ld;
  const int64_t lA0 = P.A0.ld, lA1 = P.A1.ld, lC = P.C.ld;
  const T *G0 = P.G0.at(b, h), *P0 = P.P0.at(b, h), *E = P.E.at(b, h), *RP0d = P.RP0d.at(b, h), *Dl = P.Dl.at(b, h);
  const T *c0 = P.c0.at(b, h), *c1 = P.c1.at(b, h), *QK = P.QK.at(b, h), *X1 = P.X1.at(b, h), *GG = P.GG.at(b, h);
  const T *Ga = P.Ga.at(b, h), *Pa = P.Pa.at(b, h), *M1 = z.mom ? P.M1.at(b, h) : nullptr;
  const T *gy = G.gy.at(b, h), *gw0 = G.gw0.at(b, h), *gw1 = G.gw1.at(b, h);
  const T *gs0 = z.mom ? G.gs0.at(b, h) : nullptr, *gs1 = z.mom ? G.gs1.at(b, h) : nullptr;
  const int64_t lgy = G.gy.ld, lgw0 = G.gw0.ld, lgw1 = G.gw1.ld, lgs0 = G.gs0.ld, lgs1 = G.gs1.ld;
  T *gqf = G.gqf.at(b, h), *gkf = G.gkf.at(b, h), *gW0 = G.gW0.at(b, h), *gW1 = G.gW1.at(b, h);
  T *gA0 = G.gA0.at(b, h), *gA1 = G.gA1.at(b, h), *gA = G.gA.at(b, h), *gC = G.gC.at(b, h), *gce = G.gce.at(b, h);
  T *gS0 = z.mom ? G.gS0.at(b, h) : nullptr, *gS1 = z.mom ? G.gS1.at(b, h) : nullptr;
  T *gD = z.mom ? G.gD.at(b, h) : nullptr, *gee = z.mom ? G.gee.at(b, h) : nullptr;
  const T a_end = *P.ae.at(b, h), d_end = z.mom ? *P.de.at(b, h) : T(0), p_end = z.mom ? *P.pe.at(b, h) : T(0);

  // Chunk end (forward_head): W̄ scaled into the weights' gradients; c̄0 = -(c_end ⊙ φk) W̄0ᵀ - (e_end ⊙ φk) S̄0ᵀ,
  // Ḡ0 = -(c_end ⊙ c1) W̄1 - (e_end ⊙ c1) S̄1, φ̄k = -c_end ⊙ (c0 W̄0) - e_end ⊙ (c0 S̄0), c̄1 likewise,
  // c̄_end = -rowsum((c0 W̄0) ⊙ φk) - rowsum(c1 ⊙ (G0 W̄1ᵀ)), ē_end likewise with S̄.
  auto scaled_copy = [](T* out, const T* x, int64_t lx, T s, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x ? s * x[i * lx + j] : T(0);
  };
  scaled_copy(gW0, gw0, lgw0, a_end, hid, f);
  scaled_copy(gW1, gw1, lgw1, a_end, d, hid);
  *G.gae.at(b, h) = frob(gw0, lgw0, W0, lW0, hid, f) + frob(gw1, lgw1, W1, lW1, d, hid);
  std::fill_n(gkf, N * f, T(0));
  std::fill_n(gc1, N * d, T(0));
  std::fill_n(gc0, N * hid, T(0));
  std::fill_n(gG0, N * hid, T(0));
  auto end_terms = [&](const T* gw0_, int64_t l0, const T* gw1_, int64_t l1, const T* scale, T* gscale) {
    for (int64_t r = 0; r < N; ++r) gscale[r] = 0;
    if (gw0_) end_term_backward(N, false, c0, hid, hid, kf, lkf, f, gw0_, l0, scale, gscale, gkf, f, gc0, hid, ta, tb);
    if (gw1_) end_term_backward(N, true, G0, hid, hid, c1, d, d, gw1_, l1, scale, gscale, gc1, d, gG0, hid, ta, tb);
  };
  end_terms(gw0, lgw0, gw1, lgw1, ce, gce);
  if (z.mom) {
    for (int64_t i = 0; i < hid; ++i)
      for (int64_t j = 0; j < f; ++j)
        gS0[i * f + j] = (gw0 ? d_end * gw0[i * lgw0 + j] : T(0)) + (gs0 ? p_end * gs0[i * lgs0 + j] : T(0));
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < hid; ++j)
        gS1[i * hid + j] = (gw1 ? d_end * gw1[i * lgw1 + j] : T(0)) + (gs1 ? p_end * gs1[i * lgs1 + j] : T(0));
    *G.gde.at(b, h) = frob(gw0, lgw0, S0, lS0, hid, f) + frob(gw1, lgw1, S1, lS1, d, hid);
    *G.gpe.at(b, h) = frob(gs0, lgs0, S0, lS0, hid, f) + frob(gs1, lgs1, S1, lS1, d, hid);
    end_terms(gs0, lgs0, gs1, lgs1, ee, gee);
  }

  // Read-out layer 1 (x = Ga, r = G0, c = c1, ō = ȳ): Ā = rowsum(ȳ ⊙ X1), Ḡa = (A⊙ȳ) W1 + (D⊙ȳ) S1 + S̄c' G0,
  // W̄1 += (A⊙ȳ)ᵀ Ga, S̄c = -ȳ c1ᵀ, C̄ += S̄c ⊙ GG, S̄c' = S̄c ⊙ C, c̄1 -= (C ⊙ GG)ᵀ ȳ, Ḡ0 += S̄c'ᵀ Ga.
  std::fill_n(gA, n, T(0));
  if (gD) std::fill_n(gD, n, T(0));
  std::fill_n(gGa, n * hid, T(0));
  std::fill_n(gC, n * N, T(0));
  if (gy) {
    for (int64_t i = 0; i < n; ++i) {
      gA[i] = dot(gy + i * lgy, X1 + i * d, d);
      for (int64_t j = 0; j < d; ++j) ta[i * d + j] = A[i] * gy[i * lgy + j];
    }
    gemm<T>(false, false, n, hid, d, 1, ta, d, W1, lW1, 0, gGa, hid);
    gemm<T>(true, false, d, hid, n, 1, ta, d, Ga, hid, 1, gW1, hid);
    if (z.mom) {
      for (int64_t i = 0; i < n; ++i) {
        gD[i] = dot(gy + i * lgy, M1 + i * d, d);
        for (int64_t j = 0; j < d; ++j) ta[i * d + j] = D[i] * gy[i * lgy + j];
      }
      gemm<T>(false, false, n, hid, d, 1, ta, d, S1, lS1, 1, gGa, hid);
      gemm<T>(true, false, d, hid, n, 1, ta, d, Ga, hid, 1, gS1, hid);
    }
    score_backward(n, N, d, hid, gy, lgy, c1, GG, C, lC, Ga, hid, G0, hid, gC, gc1, gGa, hid, gG0, hid, gSc, CX);
  }
  for (int64_t i = 0; i < n * hid; ++i) gGa[i] *= Pa[i];  // H̄
  const T* gH = gGa;

  // Read-out layer 0 (x = φq, r = φk, c = c0, ō = H̄), the row scalings on φq: P = H̄ W0, Ā += rowsum(P ⊙ φq),
  // φ̄q = A⊙P + D⊙(H̄ S0) + S̄c' φk, W̄0 += H̄ᵀ (A⊙φq), S̄c = -H̄ c0ᵀ, C̄ += S̄c ⊙ QK, c̄0 -= (C ⊙ QK)ᵀ H̄, φ̄k += S̄c'ᵀ φq.
  gemm<T>(false, false, n, f, hid, 1, gH, hid, W0, lW0, 0, ta, f);
  for (int64_t i = 0; i < n; ++i) {
    gA[i] += dot(ta + i * f, qf + i * lqf, f);
    for (int64_t j = 0; j < f; ++j) {
      gqf[i * f + j] = A[i] * ta[i * f + j];
      tb[i * f + j] = A[i] * qf[i * lqf + j];
    }
  }
  gemm<T>(true, false, hid, f, n, 1, gH, hid, tb, f, 1, gW0, f);
  if (z.mom) {
    gemm<T>(false, false, n, f, hid, 1, gH, hid, S0, lS0, 0, ta, f);
    for (int64_t i = 0; i < n; ++i) {
      gD[i] += dot(ta + i * f, qf + i * lqf, f);
      for (int64_t j = 0; j < f; ++j) {
        gqf[i * f + j] += D[i] * ta[i * f + j];
        tb[i * f + j] = D[i] * qf[i * lqf + j];
      }
    }
    gemm<T>(true, false, hid, f, n, 1, gH, hid, tb, f, 1, gS0, f);
  }
  score_backward(n, N, hid, f, gH, hid, c0, QK, C, lC, qf, lqf, kf, lkf, gC, gc0, gqf, f, gkf, f, gSc, CX);

  // Clip, in reverse (fused_chunk.cpp clip_backward): c̄0 becomes Δ̄, c̄1 ḡ_y.
  if (tau > 0) {
    const T *kk = P.kk.at(b, h), *dd = P.dd.at(b, h), *eev = P.eev.at(b, h), *gg = P.gg.at(b, h),
            *s = P.sv.at(b, h), *fv = P.fv.at(b, h);
    for (int64_t r = 0; r < N; ++r) {
      T *a0 = gc0 + r * hid, *a1 = gc1 + r * d, *gk = gkf + r * f, *gg0 = gG0 + r * hid;
      const T *dl = Dl + r * hid, *e = E + r * d, *kr = kf + r * lkf, *g = G0 + r * hid;
      const T gfr = dot(a0, dl, hid) + dot(a1, e, d);
      const T gs2 = s[r] >= tau * tau ? -tau * gfr / (s[r] * std::sqrt(s[r])) : T(0);
      const T fr = fv[r], x0 = gs2 * kk[r], x1 = gs2 * gg[r], xk = gs2 * dd[r], xg = gs2 * eev[r];
      for (int64_t j = 0; j < hid; ++j) a0[j] = a0[j] * fr + x0 * dl[j];
      for (int64_t j = 0; j < d; ++j) a1[j] = a1[j] * fr + x1 * e[j];
      for (int64_t j = 0; j < f; ++j) gk[j] += xk * kr[j];
      for (int64_t j = 0; j < hid; ++j) gg0[j] += xg * g[j];
    }
  }
  const T *gDl = gc0;
  T* gE = gc1;

  // Anchor pass, in reverse: R̄ = Δ̄ ⊙ GELU'(H0), ḡ_y += R̄ Â1ᵀ, Â1̄ = g_yᵀ R̄ (+ ḡ_yᵀ G0), v̄ = -ḡ_y, k̄ = ḡ_y (ℓ2),
  // Ḡ0 += ḡ_y Â1 (ℓ2), H̄0 = Ḡ0 ⊙ GELU'(H0) + Δ̄ ⊙ R ⊙ GELU''(H0), φ̄k += H̄0 Â0, Â0̄ = H̄0ᵀ φk.
  for (int64_t i = 0; i < N * hid; ++i) gR[i] = gDl[i] * P0[i];
  gemm<T>(false, true, N, d, hid, 1, gR, hid, A1, lA1, 1, gE, d);
  gemm<T>(true, false, d, hid, N, 1, E, d, gR, hid, 0, gA1, hid);
  T *gv = G.gv.at(b, h), *gk = z.l2 ? G.gk.at(b, h) : nullptr;
  for (int64_t r = 0; r < N * d; ++r) {
    gv[r] = -gE[r];
    if (gk) gk[r] = gE[r];
  }
  if (z.l2) {
    gemm<T>(false, false, N, hid, d, 1, gE, d, A1, lA1, 1, gG0, hid);
    gemm<T>(true, false, d, hid, N, 1, gE, d, G0, hid, 1, gA1, hid);
  }
  for (int64_t i = 0; i < N * hid; ++i) gG0[i] = gG0[i] * P0[i] + gDl[i] * RP0d[i];  // H̄0
  gemm<T>(false, false, N, f, hid, 1, gG0, hid, A0, lA0, 1, gkf, f);
  gemm<T>(true, false, hid, f, N, 1, gG0, hid, kf, lkf, 0, gA0, f);
}

MNEMO_SIMD_CLONES void backward_f(const Dims& z, const BwdParts<float>& G, float tau) {
  each_head<float>(z, [&](int64_t b, int64_t h, Buf<float>& s) { backward_head(z, G, b, h, tau, s); });
}
MNEMO_SIMD_CLONES void backward_d(const Dims& z, const BwdParts<double>& G, double tau) {
  each_head<double>(z, [&](int64_t b, int64_t h, Buf<double>& s) { backward_head(z, G, b, h, tau, s); });
}

// ---- tensors ----------------------------------------------------------------------------------------------
Tensor rows_unit(const Tensor& t) { return t.defined() ? fused_cpu::unit_last_stride(t) : t; }

Dims dims_of(const variable_list& in, bool mom, bool l2) {
  const auto& W0t = in[W0];
  return {in[Q].size(0), in[Q].size(1), in[Q].size(2), in[KF].size(2), in[Q].size(3), in[QF].size(3),
          W0t.size(2),   mom,          l2};
}

template <typename T>
FwdParts<T> input_parts(const variable_list& in, bool mom) {
  FwdParts<T> P;
  P.q = Part<T>(in[Q]), P.qf = Part<T>(in[QF]), P.k = Part<T>(in[K]), P.kf = Part<T>(in[KF]), P.v = Part<T>(in[V]);
  P.W0 = Part<T>(in[W0]), P.W1 = Part<T>(in[W1]), P.A0 = Part<T>(in[A0]), P.A1 = Part<T>(in[A1]);
  P.A = Part<T>(in[CA]), P.C = Part<T>(in[CC]), P.ae = Part<T>(in[AE]), P.ce = Part<T>(in[CE]);
  if (mom) {
    P.S0 = Part<T>(in[S0]), P.S1 = Part<T>(in[S1]), P.D = Part<T>(in[CD]), P.de = Part<T>(in[DE]);
    P.pe = Part<T>(in[PE]), P.ee = Part<T>(in[EE]);
  }
  return P;
}

template <typename T>
void saved_parts(FwdParts<T>& P, const Forward& o) {
  P.P0 = Part<T>(o.P0), P.G0 = Part<T>(o.G0), P.E = Part<T>(o.E), P.RP0d = Part<T>(o.RP0d), P.Dl = Part<T>(o.Dl);
  P.c0 = Part<T>(o.c0), P.c1 = Part<T>(o.c1), P.QK = Part<T>(o.QK), P.X1 = Part<T>(o.X1), P.M1 = Part<T>(o.M1);
  P.GG = Part<T>(o.GG), P.Ga = Part<T>(o.Ga), P.Pa = Part<T>(o.Pa);
  P.kk = Part<T>(o.clip.kk), P.dd = Part<T>(o.clip.dd), P.eev = Part<T>(o.clip.ee), P.gg = Part<T>(o.clip.gg);
  P.sv = Part<T>(o.clip.s), P.fv = Part<T>(o.clip.f);
}

// The inputs with unit last strides (the (b, h) matrices' rows), the [B, H] scalars as they are.
variable_list prepared(const variable_list& in) {
  variable_list x(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    x[i] = (i == AE || i == DE || i == PE) ? in[i] : rows_unit(in[i]);
  return x;
}

}  // namespace

Sizes sizes_of(const variable_list& in) {
  return {in[Q].size(0),  in[Q].size(1),  in[Q].size(2),  in[KF].size(2),
          in[Q].size(3),  in[QF].size(3), in[W0].size(2)};
}

Forward empty_forward(const Sizes& z, const torch::TensorOptions& opt, bool mom, double tau) {
  auto mat = [&](int64_t r, int64_t c) { return torch::empty({z.B, z.H, r, c}, opt); };
  auto vec = [&](int64_t r) { return torch::empty({z.B, z.H, r}, opt); };
  Forward o;
  o.y = mat(z.n, z.d), o.w0 = mat(z.hid, z.f), o.w1 = mat(z.d, z.hid);
  if (mom) o.s0 = mat(z.hid, z.f), o.s1 = mat(z.d, z.hid), o.M1 = mat(z.n, z.d);
  o.P0 = mat(z.N, z.hid), o.G0 = mat(z.N, z.hid), o.E = mat(z.N, z.d), o.RP0d = mat(z.N, z.hid);
  o.Dl = mat(z.N, z.hid);
  if (tau > 0) {
    o.c0 = mat(z.N, z.hid), o.c1 = mat(z.N, z.d);
    o.clip = {vec(z.N), vec(z.N), vec(z.N), vec(z.N), vec(z.N), vec(z.N)};
  } else {
    o.c0 = o.Dl, o.c1 = o.E;
  }
  o.QK = mat(z.n, z.N), o.X1 = mat(z.n, z.d), o.GG = mat(z.n, z.N), o.Ga = mat(z.n, z.hid), o.Pa = mat(z.n, z.hid);
  return o;
}

variable_list empty_input_grads(const Sizes& z, const torch::TensorOptions& opt, bool mom, bool l2) {
  auto mat = [&](int64_t r, int64_t c) { return torch::empty({z.B, z.H, r, c}, opt); };
  auto vec = [&](int64_t r) { return torch::empty({z.B, z.H, r}, opt); };
  variable_list g(kInputs);
  g[QF] = mat(z.n, z.f), g[KF] = mat(z.N, z.f), g[V] = mat(z.N, z.d);
  if (l2) g[K] = mat(z.N, z.d);
  g[W0] = mat(z.hid, z.f), g[W1] = mat(z.d, z.hid), g[A0] = mat(z.hid, z.f), g[A1] = mat(z.d, z.hid);
  g[CA] = vec(z.n), g[CC] = mat(z.n, z.N), g[AE] = torch::empty({z.B, z.H}, opt), g[CE] = vec(z.N);
  if (mom) {
    g[S0] = mat(z.hid, z.f), g[S1] = mat(z.d, z.hid), g[CD] = vec(z.n), g[DE] = torch::empty({z.B, z.H}, opt);
    g[PE] = torch::empty({z.B, z.H}, opt), g[EE] = vec(z.N);
  }
  return g;
}

bool cpu_form_eligible(const variable_list& in, bool mom) {
  std::vector<Tensor> used;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool momentum_only = i == S0 || i == S1 || i == CD || i == DE || i == PE || i == EE;
    if (!momentum_only || mom) used.push_back(in[i]);
  }
  for (const auto& t : used)
    if (!t.defined()) return false;
  return fused_cpu_eligible(used) && in[Q].dim() == 4 && in[Q].size(0) > 0 && in[Q].size(1) > 0;
}

Forward cpu_forward(const variable_list& in_raw, bool mom, bool l2, double tau) {
  RECORD_FUNCTION("mnemo::fused_chunk_forward", std::vector<c10::IValue>());
  const auto in = prepared(in_raw);
  const Dims z = dims_of(in, mom, l2);
  Forward o = empty_forward(sizes_of(in), in[Q].options(), mom, tau);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    auto P = input_parts<T>(in, mom);
    saved_parts(P, o);
    P.y = Part<T>(o.y), P.w0 = Part<T>(o.w0), P.w1 = Part<T>(o.w1), P.s0 = Part<T>(o.s0), P.s1 = Part<T>(o.s1);
    if constexpr (std::is_same_v<T, float>) forward_f(z, P, static_cast<float>(tau));
    else forward_d(z, P, tau);
  };
  if (in[Q].scalar_type() == torch::kFloat32) run(0.f);
  else run(0.0);
  return o;
}

variable_list cpu_backward(const variable_list& in_raw, const Forward& f, const variable_list& go, bool mom, bool l2,
                           double tau) {
  RECORD_FUNCTION("mnemo::fused_chunk_backward", std::vector<c10::IValue>());
  const auto in = prepared(in_raw);  // v is not kept (v̄ = -ḡ_y): its entry stays undefined
  const Dims z = dims_of(in, mom, l2);
  variable_list g = empty_input_grads(sizes_of(in), in[Q].options(), mom, l2);
  auto grad_in = [&](size_t i) { return i < go.size() ? rows_unit(go[i]) : Tensor(); };
  const Tensor gy = grad_in(0), gw0 = grad_in(1), gw1 = grad_in(2), gs0 = mom ? grad_in(3) : Tensor(),
               gs1 = mom ? grad_in(4) : Tensor();
  auto run = [&](auto zero) {
    using T = decltype(zero);
    BwdParts<T> G;
    G.x = input_parts<T>(in, mom);
    saved_parts(G.x, f);
    G.gy = Part<T>(gy), G.gw0 = Part<T>(gw0), G.gw1 = Part<T>(gw1), G.gs0 = Part<T>(gs0), G.gs1 = Part<T>(gs1);
    G.gqf = Part<T>(g[QF]), G.gk = Part<T>(g[K]), G.gkf = Part<T>(g[KF]), G.gv = Part<T>(g[V]);
    G.gW0 = Part<T>(g[W0]), G.gW1 = Part<T>(g[W1]), G.gS0 = Part<T>(g[S0]), G.gS1 = Part<T>(g[S1]);
    G.gA0 = Part<T>(g[A0]), G.gA1 = Part<T>(g[A1]), G.gA = Part<T>(g[CA]), G.gD = Part<T>(g[CD]);
    G.gC = Part<T>(g[CC]), G.gae = Part<T>(g[AE]), G.gde = Part<T>(g[DE]), G.gce = Part<T>(g[CE]);
    G.gpe = Part<T>(g[PE]), G.gee = Part<T>(g[EE]);
    if constexpr (std::is_same_v<T, float>) backward_f(z, G, static_cast<float>(tau));
    else backward_d(z, G, tau);
  };
  if (in[Q].scalar_type() == torch::kFloat32) run(0.f);
  else run(0.0);
  g[Q] = go[0].defined() ? go[0] : torch::zeros_like(in_raw[Q]);
  return g;
}

}  // namespace mnemo::fused_chunk_forms
