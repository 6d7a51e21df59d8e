// The CPU form of Memora's lag token (fused_lag_cpu.h). Per (b, h), rows of the weights W0 [hid, d], W1 [d, hid]:
//   forward   anchor pass (anchor_pass.h) of the token; row i of W0: L = a ⊙ log max(W0_i, floor) - η ⊙ Dl_i k,
//             W0'_i = softmax(L); row r of W1: L = a_r log max(W1_r, floor) - η_r Gu_r G0, W1'_r = softmax(L);
//             read-out out = q + LN(W1' GELU(W0' q)) ⊙ γ + β
//   backward  the read-out and the anchor pass recomputed (O(hid·d)), then per row the softmax adjoint
//             L̄ = W' ⊙ (W̄' - ⟨W̄', W'⟩) and its terms in ā, η̄, W̄, D̄l / Ḡu, k̄ / Ḡ0 in the same pass;
//             then the anchor pass's adjoint (anchor_pass.cpp, line by line, here on vectors).
#include "runtime/miras/fused_lag_cpu.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace mnemo::miras_lag {

namespace {

using torch::Tensor;

template <typename T>
T mean(const std::vector<T>& x) {
  T s = 0;
  for (T v : x) s += v;
  return s / T(x.size());
}

// GELU, its derivative and second derivative (gelu.h): Φ = ½(1 + erf(h/√2)), φ = e^{-h²/2}/√(2π).
template <typename T>
void gelu3(T h, T& value, T& grad, T* second) {
  const T cdf = T(0.5) * (T(1) + std::erf(h * T(0.70710678118654752440)));
  const T pdf = std::exp(T(-0.5) * h * h) * T(0.39894228040143267794);
  value = h * cdf;
  grad = cdf + h * pdf;
  if (second) *second = pdf * (T(2) - h * h);
}

// Pointers of one (b, h) into the contiguous inputs.
template <typename T>
struct Head {
  const T *q, *k, *v, *la, *eta, *gam, *bet, *w0, *w1;
  T delta = 0;
  int64_t d, hid, G;
  T a(int64_t c) const { return std::exp(la[G == 1 ? 0 : c]); }
  T e(int64_t c) const { return eta[G == 1 ? 0 : c]; }
};

// The anchor pass of the token at W (anchor_pass.h), as vectors.
template <typename T>
struct Anchor {
  std::vector<T> G0, P0, P0d, R, Dl;  // [hid]
  std::vector<T> N0, E, Gy, Gu;       // [d]
  T s0 = 0, hub = 1;
};

template <typename T>
Anchor<T> anchor_pass(const Head<T>& x, const MirasOptions& o) {
  const int64_t d = x.d, hid = x.hid;
  Anchor<T> A;
  A.G0.resize(hid), A.P0.resize(hid), A.P0d.resize(hid), A.R.assign(hid, 0), A.Dl.resize(hid);
  for (int64_t i = 0; i < hid; ++i) {
    T h = 0;
    for (int64_t j = 0; j < d; ++j) h += x.w0[i * d + j] * x.k[j];
    gelu3(h, A.G0[i], A.P0[i], &A.P0d[i]);
  }
  std::vector<T> U(d, 0);
  for (int64_t r = 0; r < d; ++r)
    for (int64_t i = 0; i < hid; ++i) U[r] += x.w1[r * hid + i] * A.G0[i];
  const T mu = mean(U);
  T var = 0;
  for (auto& u : U) u -= mu, var += u * u;
  A.s0 = std::sqrt(var / T(d) + T(o.ln_eps));
  A.N0.resize(d), A.E.resize(d), A.Gy.resize(d), A.Gu.resize(d);
  T ms = 0;
  for (int64_t r = 0; r < d; ++r) {
    A.N0[r] = U[r] / A.s0;
    A.E[r] = x.k[r] + A.N0[r] * x.gam[r] + x.bet[r] - x.v[r];
    ms += A.E[r] * A.E[r];
  }
  // g_y = φ(E) (miras_bias_gradient)
  if (o.bias == "huber") A.hub = std::sqrt(ms / T(d)) <= x.delta ? T(1) : T(0);
  for (int64_t r = 0; r < d; ++r) {
    const T e = A.E[r];
    if (o.bias == "l2")
      A.Gy[r] = e;
    else if (o.bias == "lp")
      A.Gy[r] = T(o.p) * e * std::pow(e * e + T(o.lp_eps), T((o.p - 2.0) / 2.0));
    else
      A.Gy[r] = A.hub * e + (T(1) - A.hub) * x.delta * e / std::sqrt(e * e + T(o.huber_eps));
  }
  // Gu = LN adjoint of γ g_y at N0; R = Gu W1; Dl = R ⊙ GELU'(H0)
  std::vector<T> gh(d), ghn(d);
  for (int64_t r = 0; r < d; ++r) gh[r] = A.Gy[r] * x.gam[r], ghn[r] = gh[r] * A.N0[r];
  const T m1 = mean(gh), m2 = mean(ghn);
  for (int64_t r = 0; r < d; ++r) A.Gu[r] = (gh[r] - m1 - A.N0[r] * m2) / A.s0;
  for (int64_t r = 0; r < d; ++r)
    for (int64_t i = 0; i < hid; ++i) A.R[i] += A.Gu[r] * x.w1[r * hid + i];
  for (int64_t i = 0; i < hid; ++i) A.Dl[i] = A.R[i] * A.P0[i];
  return A;
}

// The read-out at the new weights: h = W0' q, Ga = GELU(h), u = W1' Ga, nrm = LN(u) with scale s.
template <typename T>
struct Read {
  std::vector<T> Ga, Pa, nrm;
  T s = 0;
};
template <typename T>
Read<T> read_out(const T* q, const T* w0, const T* w1, int64_t d, int64_t hid, double ln_eps) {
  Read<T> R;
  R.Ga.resize(hid), R.Pa.resize(hid), R.nrm.assign(d, 0);
  for (int64_t i = 0; i < hid; ++i) {
    T h = 0;
    for (int64_t j = 0; j < d; ++j) h += w0[i * d + j] * q[j];
    gelu3<T>(h, R.Ga[i], R.Pa[i], nullptr);
  }
  for (int64_t r = 0; r < d; ++r)
    for (int64_t i = 0; i < hid; ++i) R.nrm[r] += w1[r * hid + i] * R.Ga[i];
  const T mu = mean(R.nrm);
  T var = 0;
  for (auto& u : R.nrm) u -= mu, var += u * u;
  R.s = std::sqrt(var / T(d) + T(ln_eps));
  for (auto& u : R.nrm) u /= R.s;
  return R;
}

// Row-wise softmax of logits in place.
template <typename T>
void softmax_row(T* x, int64_t n) {
  T m = x[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  T s = 0;
  for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j] - m), s += x[j];
  for (int64_t j = 0; j < n; ++j) x[j] /= s;
}

template <typename T>
Head<T> head_of(const torch::autograd::variable_list& in, int64_t b, int64_t h, int64_t H, bool huber) {
  const int64_t d = in[Q].size(-1), hid = in[W0].size(-2), G = in[LA].size(-1), bh = b * H + h;
  Head<T> x{in[Q].data_ptr<T>() + bh * d,      in[K].data_ptr<T>() + bh * d,      in[V].data_ptr<T>() + bh * d,
            in[LA].data_ptr<T>() + bh * G,     in[ETA].data_ptr<T>() + bh * G,    in[GAM].data_ptr<T>() + h * d,
            in[BET].data_ptr<T>() + h * d,     in[W0].data_ptr<T>() + bh * hid * d, in[W1].data_ptr<T>() + bh * d * hid,
            0, d, hid, G};
  if (huber) x.delta = in[DELTA].data_ptr<T>()[bh];
  return x;
}

torch::autograd::variable_list dense(const torch::autograd::variable_list& in) {
  torch::autograd::variable_list c;
  for (const auto& t : in) c.push_back(t.numel() > 0 ? t.contiguous() : t);
  // γ, β arrive as [1, H, 1, d] views of [H·d] parameters: contiguous already.
  return c;
}

template <typename T>
CpuForward forward_t(const torch::autograd::variable_list& in, const MirasOptions& o) {
  const int64_t B = in[Q].size(0), H = in[Q].size(1), d = in[Q].size(-1), hid = in[W0].size(-2);
  CpuForward f;
  f.out = torch::empty_like(in[Q]);
  f.w0 = torch::empty_like(in[W0]), f.w1 = torch::empty_like(in[W1]);
  f.lg0 = torch::empty_like(in[W0]), f.lg1 = torch::empty_like(in[W1]);
  const bool huber = o.bias == "huber";
  const T floor = T(o.kl_floor);
  at::parallel_for(0, B * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bh = i0; bh < i1; ++bh) {
      const auto x = head_of<T>(in, bh / H, bh % H, H, huber);
      const auto A = anchor_pass(x, o);
      T *w0 = f.w0.data_ptr<T>() + bh * hid * d, *w1 = f.w1.data_ptr<T>() + bh * d * hid;
      T *lg0 = f.lg0.data_ptr<T>() + bh * hid * d, *lg1 = f.lg1.data_ptr<T>() + bh * d * hid;
      for (int64_t i = 0; i < hid; ++i) {  // W0' rows: gates on columns
        for (int64_t j = 0; j < d; ++j) {
          const int64_t at = i * d + j;
          lg0[at] = std::log(std::max(x.w0[at], floor));
          w0[at] = x.a(j) * lg0[at] - x.e(j) * A.Dl[i] * x.k[j];
        }
        softmax_row(w0 + i * d, d);
      }
      for (int64_t r = 0; r < d; ++r) {  // W1' rows: gates on rows
        const T ar = x.a(r), er = x.e(r);
        for (int64_t i = 0; i < hid; ++i) {
          const int64_t at = r * hid + i;
          lg1[at] = std::log(std::max(x.w1[at], floor));
          w1[at] = ar * lg1[at] - er * A.Gu[r] * A.G0[i];
        }
        softmax_row(w1 + r * hid, hid);
      }
      const auto R = read_out(x.q, w0, w1, d, hid, o.ln_eps);
      T* out = f.out.data_ptr<T>() + bh * d;
      for (int64_t r = 0; r < d; ++r) out[r] = x.q[r] + R.nrm[r] * x.gam[r] + x.bet[r];
    }
  });
  return f;
}

template <typename T>
torch::autograd::variable_list backward_t(const torch::autograd::variable_list& in, const CpuForward& f,
                                          const Tensor& gout_t, const Tensor& gw0_t, const Tensor& gw1_t,
                                          const MirasOptions& o) {
  const int64_t B = in[Q].size(0), H = in[Q].size(1), d = in[Q].size(-1), hid = in[W0].size(-2),
                G = in[LA].size(-1);
  const bool huber = o.bias == "huber";
  const T floor = T(o.kl_floor);
  torch::autograd::variable_list g(kInputs);
  for (int i : {Q, K, V, LA, ETA, W0, W1}) g[i] = torch::empty_like(in[i]);
  auto ggam = torch::empty({B, H, 1, d}, in[Q].options()), gbet = torch::empty_like(ggam);
  if (huber) g[DELTA] = torch::empty_like(in[DELTA]);
  const T* gout_p = gout_t.defined() ? gout_t.data_ptr<T>() : nullptr;
  const T* gw0_p = gw0_t.defined() ? gw0_t.data_ptr<T>() : nullptr;
  const T* gw1_p = gw1_t.defined() ? gw1_t.data_ptr<T>() : nullptr;
  at::parallel_for(0, B * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<T> gGa(hid), gh(hid), gDl(hid), gG0(hid), row(std::max(d, hid));
    std::vector<T> gn(d), gu(d), ga(d), ge(d), gGu(d);
    for (int64_t bh = i0; bh < i1; ++bh) {
      const auto x = head_of<T>(in, bh / H, bh % H, H, huber);
      const auto A = anchor_pass(x, o);
      const T *w0 = f.w0.data_ptr<T>() + bh * hid * d, *w1 = f.w1.data_ptr<T>() + bh * d * hid;
      const T *lg0 = f.lg0.data_ptr<T>() + bh * hid * d, *lg1 = f.lg1.data_ptr<T>() + bh * d * hid;
      const T* gw0n = gw0_p ? gw0_p + bh * hid * d : nullptr;
      const T* gw1n = gw1_p ? gw1_p + bh * d * hid : nullptr;
      const auto Rd = read_out(x.q, w0, w1, d, hid, o.ln_eps);
      T *gq = g[Q].data_ptr<T>() + bh * d, *gk = g[K].data_ptr<T>() + bh * d, *gv = g[V].data_ptr<T>() + bh * d;
      T *gW0 = g[W0].data_ptr<T>() + bh * hid * d, *gW1 = g[W1].data_ptr<T>() + bh * d * hid;
      T *ggm = ggam.data_ptr<T>() + bh * d, *gbt = gbet.data_ptr<T>() + bh * d;
      // Read-out: out = q + LN(u) ⊙ γ + β.
      for (int64_t r = 0; r < d; ++r) {
        const T go = gout_p ? gout_p[bh * d + r] : T(0);
        gq[r] = go, ggm[r] = go * Rd.nrm[r], gbt[r] = go, gn[r] = go * x.gam[r], gk[r] = 0;
      }
      T m1 = mean(gn), m2 = 0;
      for (int64_t r = 0; r < d; ++r) m2 += gn[r] * Rd.nrm[r];
      m2 /= T(d);
      for (int64_t r = 0; r < d; ++r) gu[r] = (gn[r] - m1 - Rd.nrm[r] * m2) / Rd.s;
      std::fill(gGa.begin(), gGa.end(), T(0));
      for (int64_t r = 0; r < d; ++r)
        for (int64_t i = 0; i < hid; ++i) gGa[i] += gu[r] * w1[r * hid + i];
      for (int64_t i = 0; i < hid; ++i) gh[i] = gGa[i] * Rd.Pa[i];
      for (int64_t i = 0; i < hid; ++i)
        for (int64_t j = 0; j < d; ++j) gq[j] += gh[i] * w0[i * d + j];
      std::fill(ga.begin(), ga.end(), T(0));
      std::fill(ge.begin(), ge.end(), T(0));
      // Rows of W0: W̄' = (upstream) + h̄ qᵀ, L̄ = W' ⊙ (W̄' - ⟨W̄', W'⟩), L = a ⊙ lg0 - η ⊙ Dl kᵀ.
      for (int64_t i = 0; i < hid; ++i) {
        T dot = 0;
        for (int64_t j = 0; j < d; ++j) {
          row[j] = (gw0n ? gw0n[i * d + j] : T(0)) + gh[i] * x.q[j];
          dot += row[j] * w0[i * d + j];
        }
        T gdl = 0;
        for (int64_t j = 0; j < d; ++j) {
          const int64_t at = i * d + j;
          const T gL = w0[at] * (row[j] - dot), ej = x.e(j);
          ga[j] += gL * lg0[at];
          ge[j] -= gL * A.Dl[i] * x.k[j];
          gdl -= ej * gL * x.k[j];
          gk[j] -= A.Dl[i] * ej * gL;
          gW0[at] = x.w0[at] >= floor ? x.a(j) * gL / x.w0[at] : T(0);  // log max(W, floor)
        }
        gDl[i] = gdl;
      }
      // Rows of W1: W̄' = (upstream) + ū Gaᵀ, L = a_r lg1 - η_r Gu_r G0ᵀ.
      std::fill(gG0.begin(), gG0.end(), T(0));
      for (int64_t r = 0; r < d; ++r) {
        T dot = 0;
        for (int64_t i = 0; i < hid; ++i) {
          row[i] = (gw1n ? gw1n[r * hid + i] : T(0)) + gu[r] * Rd.Ga[i];
          dot += row[i] * w1[r * hid + i];
        }
        const T ar = x.a(r), er = x.e(r);
        T gar = 0, ger = 0, ggu = 0;
        for (int64_t i = 0; i < hid; ++i) {
          const int64_t at = r * hid + i;
          const T gL = w1[at] * (row[i] - dot);
          gar += gL * lg1[at];
          ger -= gL * A.Gu[r] * A.G0[i];
          ggu -= er * gL * A.G0[i];
          gG0[i] -= A.Gu[r] * er * gL;
          gW1[at] = x.w1[at] >= floor ? ar * gL / x.w1[at] : T(0);
        }
        ga[r] += gar, ge[r] += ger, gGu[r] = ggu;
      }
      T *gla = g[LA].data_ptr<T>() + bh * G, *geta = g[ETA].data_ptr<T>() + bh * G;
      if (G == 1) {
        T sa = 0, se = 0;
        for (int64_t c = 0; c < d; ++c) sa += ga[c], se += ge[c];
        gla[0] = sa * x.a(0), geta[0] = se;
      } else {
        for (int64_t c = 0; c < d; ++c) gla[c] = ga[c] * x.a(c), geta[c] = ge[c];
      }
      // Anchor pass in reverse (anchor_pass.cpp anchor_backward): Dl = R ⊙ P0, R = Gu W1.
      std::vector<T> gR(hid), gP0(hid);
      for (int64_t i = 0; i < hid; ++i) gR[i] = gDl[i] * A.P0[i], gP0[i] = gDl[i] * A.R[i];
      for (int64_t r = 0; r < d; ++r) {
        T s = 0;
        for (int64_t i = 0; i < hid; ++i) {
          s += gR[i] * x.w1[r * hid + i];
          gW1[r * hid + i] += A.Gu[r] * gR[i];
        }
        gGu[r] += s;
      }
      // Gu = (γ g_y - mean - N0 mean(γ g_y N0)) / s0
      std::vector<T> gZ(d), ghg(d), gN0(d), gE(d), tmp(d);
      T gs0 = 0;
      for (int64_t r = 0; r < d; ++r) gZ[r] = gGu[r] / A.s0, gs0 -= gGu[r] * A.Gu[r] / A.s0, ghg[r] = A.Gy[r] * x.gam[r];
      T mz = mean(gZ), mzn = 0, mhn = 0;
      for (int64_t r = 0; r < d; ++r) mzn += gZ[r] * A.N0[r], mhn += ghg[r] * A.N0[r];
      mzn /= T(d), mhn /= T(d);
      T* gdelta = huber ? g[DELTA].data_ptr<T>() + bh : nullptr;
      if (gdelta) *gdelta = 0;
      for (int64_t r = 0; r < d; ++r) {
        const T ggh = gZ[r] - mz - A.N0[r] * mzn;
        gN0[r] = -mhn * gZ[r] - mzn * ghg[r];
        const T gGy = ggh * x.gam[r];
        ggm[r] += ggh * A.Gy[r];
        const T e = A.E[r];
        if (o.bias == "l2") {
          gE[r] = gGy;
        } else if (o.bias == "lp") {
          const T w = e * e + T(o.lp_eps);
          gE[r] = gGy * T(o.p) * std::pow(w, T((o.p - 4.0) / 2.0)) * (w + T(o.p - 2.0) * e * e);
        } else {
          const T w = e * e + T(o.huber_eps);
          gE[r] = gGy * (A.hub + (T(1) - A.hub) * x.delta * T(o.huber_eps) / (w * std::sqrt(w)));
          *gdelta += gGy * (T(1) - A.hub) * e / std::sqrt(w);
        }
        // E = k + N0 ⊙ γ + β - v
        gv[r] = -gE[r];
        gN0[r] += gE[r] * x.gam[r];
        ggm[r] += gE[r] * A.N0[r];
        gbt[r] += gE[r];
        gk[r] += gE[r];
      }
      // N0 = LN(U0) with the extra s0 path of Gu.
      T gs0t = gs0;
      for (int64_t r = 0; r < d; ++r) gs0t -= gN0[r] * A.N0[r] / A.s0;
      for (int64_t r = 0; r < d; ++r) tmp[r] = gN0[r] / A.s0 + gs0t * A.N0[r] / T(d);  // C̄0
      const T mc = mean(tmp);
      for (int64_t r = 0; r < d; ++r) {
        const T gU = tmp[r] - mc;
        for (int64_t i = 0; i < hid; ++i) {
          gG0[i] += gU * x.w1[r * hid + i];
          gW1[r * hid + i] += gU * A.G0[i];
        }
      }
      // G0 = GELU(H0), H0 = W0 k.
      for (int64_t i = 0; i < hid; ++i) {
        const T gH = gG0[i] * A.P0[i] + gP0[i] * A.P0d[i];
        for (int64_t j = 0; j < d; ++j) {
          gk[j] += gH * x.w0[i * d + j];
          gW0[i * d + j] += gH * x.k[j];
        }
      }
    }
  });
  g[GAM] = ggam.sum(0, true).sum_to_size(in[GAM].sizes());
  g[BET] = gbet.sum(0, true).sum_to_size(in[BET].sizes());
  return g;
}

}  // namespace

CpuForward forward_cpu(const torch::autograd::variable_list& in_, const MirasOptions& o) {
  const auto in = dense(in_);
  if (in[Q].scalar_type() == torch::kFloat32) return forward_t<float>(in, o);
  return forward_t<double>(in, o);
}

torch::autograd::variable_list backward_cpu(const torch::autograd::variable_list& in_, const CpuForward& f,
                                            const Tensor& gout, const Tensor& gw0, const Tensor& gw1,
                                            const MirasOptions& o) {
  const auto in = dense(in_);
  auto c = [](const Tensor& t) { return t.defined() ? t.contiguous() : t; };
  if (in[Q].scalar_type() == torch::kFloat32) return backward_t<float>(in, f, c(gout), c(gw0), c(gw1), o);
  return backward_t<double>(in, f, c(gout), c(gw0), c(gw1), o);
}

}  // namespace mnemo::miras_lag
