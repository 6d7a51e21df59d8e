// The selective scan as one fused pass on the CPU (docs/models.md#mamba), the way mamba_ssm's selective-scan kernel
// runs it: sequential in time, parallel over channels, never materialising a = e^{ΔA}, b = Δ x B or the states
// h [B, T, D, N]. Forward keeps the state at the start of each chunk of `chunk_size` steps; backward recomputes one
// chunk's states from its checkpoint and runs the adjoint backwards through it.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/precision.h"
#include "runtime/mamba/selective_scan.h"

namespace mnemo {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ScanShape {
  int64_t B, T, D, N, C, chunks;
};

// The decays a_t[d, n] = e^{Δ_t[d] A[d, n]} of steps [t0, t1) and channels [d0, d1) of row b, [t1 − t0, d1 − d0, N]
// contiguous: one vectorised exp per chunk (the scalar exp would dominate the scan).
torch::Tensor chunk_decays(const torch::Tensor& dt, const torch::Tensor& A, int64_t b, int64_t t0, int64_t t1,
                           int64_t d0, int64_t d1) {
  auto steps = dt.select(0, b).slice(0, t0, t1).slice(1, d0, d1);  // [len, Dg]
  return (steps.unsqueeze(-1) * A.slice(0, d0, d1).unsqueeze(0)).exp_().contiguous();
}

// Channels [d0, d1) of batch row b go through the scan: writes y, the final state and the checkpoints (the state
// before each chunk).
template <typename S>
void scan_rows(const ScanShape& s, int64_t b, int64_t d0, int64_t d1, const torch::Tensor& dt_t,
               const torch::Tensor& A_t, const S* x, const S* dt, const S* Bm, const S* Cm, const S* h0, S* y, S* hT,
               S* ck) {
  const int64_t D = s.D, N = s.N, T = s.T;
  std::vector<S> h(static_cast<size_t>((d1 - d0) * N));
  std::copy(h0 + (b * D + d0) * N, h0 + (b * D + d1) * N, h.begin());
  for (int64_t c = 0; c < s.chunks; ++c) {
    const int64_t t0 = c * s.C, t1 = std::min(T, t0 + s.C);
    std::copy(h.begin(), h.end(), ck + ((b * s.chunks + c) * D + d0) * N);
    const auto decays = chunk_decays(dt_t, A_t, b, t0, t1, d0, d1);
    const S* a = decays.data_ptr<S>();
    for (int64_t t = t0; t < t1; ++t) {
      const S* Bt = Bm + (b * T + t) * N;
      const S* Ct = Cm + (b * T + t) * N;
      for (int64_t d = d0; d < d1; ++d) {
        const int64_t i = (b * T + t) * D + d;
        const S u = dt[i] * x[i];
        S* hd = h.data() + (d - d0) * N;
        const S* ad = a + ((t - t0) * (d1 - d0) + (d - d0)) * N;
        for (int64_t n = 0; n < N; ++n) hd[n] = ad[n] * hd[n] + u * Bt[n];  // h_t = e^{Δ_t A} h_{t−1} + Δ_t x_t B_t
        S acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += Ct[n] * hd[n];  // y_t = Σ_n C_t[n] h_t[n]
        y[i] = acc;
      }
    }
  }
  std::copy(h.begin(), h.end(), hT + (b * D + d0) * N);
}

// The adjoint of scan_rows for channels [d0, d1) of row b. gB, gC are this channel block's own partial sums
// ([B, T, N]); gA its rows of dL/dA.
template <typename S>
void scan_rows_backward(const ScanShape& s, int64_t b, int64_t d0, int64_t d1, const torch::Tensor& dt_t,
                        const torch::Tensor& A_t, const S* x, const S* dt, const S* A, const S* Bm, const S* Cm,
                        const S* ck, const S* gy, const S* ghT, S* gx, S* gdt, S* gA, S* gB, S* gC, S* gh0) {
  const int64_t D = s.D, N = s.N, T = s.T, W = (d1 - d0) * N;
  std::vector<S> g(static_cast<size_t>(W));  // a_{t+1} ⊙ (total adjoint of h_{t+1}): what h_t receives from later
  std::copy(ghT + (b * D + d0) * N, ghT + (b * D + d1) * N, g.begin());
  std::vector<S> hs(static_cast<size_t>((s.C + 1) * W));  // the chunk's states, row 0 the checkpoint
  for (int64_t c = s.chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * s.C, t1 = std::min(T, t0 + s.C);
    std::copy(ck + ((b * s.chunks + c) * D + d0) * N, ck + ((b * s.chunks + c) * D + d1) * N, hs.begin());
    const auto decays = chunk_decays(dt_t, A_t, b, t0, t1, d0, d1);
    const S* a = decays.data_ptr<S>();
    for (int64_t t = t0; t < t1; ++t) {  // recompute h_t from the checkpoint
      const S* Bt = Bm + (b * T + t) * N;
      const S* prev = hs.data() + (t - t0) * W;
      const S* at = a + (t - t0) * W;
      S* cur = hs.data() + (t - t0 + 1) * W;
      for (int64_t d = d0; d < d1; ++d) {
        const int64_t i = (b * T + t) * D + d, o = (d - d0) * N;
        const S u = dt[i] * x[i];
        for (int64_t n = 0; n < N; ++n) cur[o + n] = at[o + n] * prev[o + n] + u * Bt[n];
      }
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const S* Bt = Bm + (b * T + t) * N;
      const S* Ct = Cm + (b * T + t) * N;
      S* gBt = gB + (b * T + t) * N;
      S* gCt = gC + (b * T + t) * N;
      const S* prev = hs.data() + (t - t0) * W;
      const S* cur = hs.data() + (t - t0 + 1) * W;
      const S* at = a + (t - t0) * W;
      for (int64_t d = d0; d < d1; ++d) {
        const int64_t i = (b * T + t) * D + d, o = (d - d0) * N;
        const S step = dt[i], xv = x[i], gyv = gy[i];
        const S* Ad = A + d * N;
        S* gAd = gA + d * N;
        S* gd = g.data() + o;
        S g_step = 0, g_x = 0;
        for (int64_t n = 0; n < N; ++n) {
          const S a_n = at[o + n];
          gCt[n] += gyv * cur[o + n];
          const S G = gd[n] + gyv * Ct[n];   // total adjoint of h_t
          const S ga = G * prev[o + n] * a_n;  // ∂L/∂(Δ_t A) = ∂L/∂a_t · a_t
          g_step += ga * Ad[n] + G * xv * Bt[n];
          gAd[n] += ga * step;
          g_x += G * Bt[n];
          gBt[n] += G * step * xv;
          gd[n] = G * a_n;
        }
        gdt[i] = g_step;
        gx[i] = g_x * step;
      }
    }
  }
  std::copy(g.begin(), g.end(), gh0 + (b * D + d0) * N);  // a_0 ⊙ (adjoint of h_0) = ∂L/∂h_{−1}
}

// Channel blocks: one per thread (at most one per channel).
std::vector<std::pair<int64_t, int64_t>> channel_blocks(int64_t D) {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), D));
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (int64_t k = 0; k < n; ++k) blocks.push_back({D * k / n, D * (k + 1) / n});
  return blocks;
}

struct SelectiveScanFn : torch::autograd::Function<SelectiveScanFn> {
  // inputs: x, dt [B, T, D], A [D, N], B, C [B, T, N], h0 [B, D, N], all contiguous in one floating dtype.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& dt,
                               const torch::Tensor& A, const torch::Tensor& Bm, const torch::Tensor& Cm,
                               const torch::Tensor& h0, int64_t chunk) {
    const ScanShape s{x.size(0), x.size(1), x.size(2), A.size(1), chunk, (x.size(1) + chunk - 1) / chunk};
    auto y = torch::empty_like(x), hT = torch::empty_like(h0);
    auto ck = torch::empty({s.B, s.chunks, s.D, s.N}, x.options());
    const auto blocks = channel_blocks(s.D);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_fused", [&] {
      at::parallel_for(0, static_cast<int64_t>(blocks.size()), 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t b = 0; b < s.B; ++b)
            scan_rows<scalar_t>(s, b, blocks[k].first, blocks[k].second, dt, A, x.data_ptr<scalar_t>(),
                                dt.data_ptr<scalar_t>(), Bm.data_ptr<scalar_t>(),
                                Cm.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                hT.data_ptr<scalar_t>(), ck.data_ptr<scalar_t>());
      });
    });
    ctx->save_for_backward({x, dt, A, Bm, Cm, ck});
    ctx->saved_data["chunk"] = chunk;
    return {y, hT};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto v = ctx->get_saved_variables();
    const auto &x = v[0], &dt = v[1], &A = v[2], &Bm = v[3], &Cm = v[4], &ck = v[5];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const ScanShape s{x.size(0), x.size(1), x.size(2), A.size(1), chunk, ck.size(1)};
    auto gy = grad_out[0].defined() ? grad_out[0].contiguous() : torch::zeros_like(x);
    auto ghT = grad_out[1].defined() ? grad_out[1].contiguous() : torch::zeros({s.B, s.D, s.N}, x.options());
    const auto blocks = channel_blocks(s.D);
    const int64_t nb = static_cast<int64_t>(blocks.size());
    auto gx = torch::empty_like(x), gdt = torch::empty_like(dt), gA = torch::zeros_like(A);
    auto gB = torch::zeros({nb, s.B, s.T, s.N}, x.options()), gC = torch::zeros({nb, s.B, s.T, s.N}, x.options());
    auto gh0 = torch::empty({s.B, s.D, s.N}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_fused_backward", [&] {
      at::parallel_for(0, nb, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t b = 0; b < s.B; ++b)
            scan_rows_backward<scalar_t>(
                s, b, blocks[k].first, blocks[k].second, dt, A, x.data_ptr<scalar_t>(), dt.data_ptr<scalar_t>(),
                A.data_ptr<scalar_t>(), Bm.data_ptr<scalar_t>(), Cm.data_ptr<scalar_t>(), ck.data_ptr<scalar_t>(),
                gy.data_ptr<scalar_t>(), ghT.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(), gdt.data_ptr<scalar_t>(),
                gA.data_ptr<scalar_t>(), gB[k].data_ptr<scalar_t>(), gC[k].data_ptr<scalar_t>(),
                gh0.data_ptr<scalar_t>());
      });
    });
    return {gx, gdt, gA, gB.sum(0), gC.sum(0), gh0, torch::Tensor()};
  }
};

}  // namespace

RecurrentResult selective_scan_fused(const torch::Tensor& x, const torch::Tensor& dt, const torch::Tensor& A,
                                     const torch::Tensor& B, const torch::Tensor& C,
                                     const torch::Tensor& initial_state, int64_t chunk_size) {
  check_selective_scan_inputs("selective_scan_fused", x, dt, A, B, C, initial_state);
  check_chunking("selective_scan_fused", x.size(1), chunk_size);
  if (!x.device().is_cpu()) throw Error("selective_scan_fused: runs on CPU tensors; on " + x.device().str() +
                                        " use selective_scan_chunk");
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  const auto ct = recurrence_dtype(x);
  auto in = [&](const torch::Tensor& t) { return t.to(ct).contiguous(); };
  auto h0 = initial_state.defined() ? in(initial_state)
                                    : torch::zeros({x.size(0), x.size(2), A.size(1)}, x.options().dtype(ct));
  auto r = SelectiveScanFn::apply(in(x), in(dt), in(A), in(B), in(C), h0, std::min(chunk_size, x.size(1)));
  return {r[0].to(x.scalar_type()), r[1]};
}

}  // namespace mnemo
