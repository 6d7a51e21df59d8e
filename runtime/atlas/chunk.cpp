// Atlas GD family kernel (docs/models.md#dla-swla-and-omeganet): chunk-wise Omega via the dual form of
// docs/models.md#deep-memory with the b × (b+c-1) window coefficients (omega_chunk, fused per chunk for the
// residual-MLP memory, and omega_chunk_composed, op by op). The token-by-token reference is naive.cpp; the shared
// preparation prepare.cpp.
#include "runtime/atlas/omega.h"
#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "core/common.h"

namespace mnemo {

namespace atlas_detail {
namespace {

OmegaResult omega_chunk_impl(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                             const OmegaState& init, bool allow_fused) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  if (opt.muon) return atlas_muon_chunk(spec, opt, in, init);
  const bool fused = allow_fused && fused_chunk_supported(spec);
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  const auto sizes = chunk_piece_sizes(T, b, off);
  const auto pieces = split_inputs(p.in, sizes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const auto& x = pieces[i];
    const auto &qc = x.q, &qfc = x.qf;
    // Window arrays over positions [pos-c+1, pos+n-1]: carried c-1 tokens then the piece (N = n + c - 1).
    auto K = torch::cat({p.bk, x.k}, 2), KF = torch::cat({p.bkf, x.kf}, 2);
    auto V = torch::cat({p.bv, x.v}, 2), G = torch::cat({p.bg, x.gamma}, 2);
    // A_t = Π_{r=s}^{t} α_r, (L ⊙ η)[t, n'] = Π_{r=n'+1}^{t} α_r η_n' (masked exponentials, docs/models.md#numerical-stability).
    auto lc = momentum_chunk_coefficients(x.log_alpha, {}, x.eta).dual;
    // C = (L ⊙ η) · (M_s ⊙ γ)   (docs/models.md#dla-swla-and-omeganet), [B, H, n, N]
    auto C = torch::matmul(lc.C, band_mask(n, c, K.options()) * G.unsqueeze(-2));
    if (fused) {  // one autograd node with a hand-written backward (runtime/deep_memory/fused_chunk.h)
      FusedChunkInputs fin;
      fin.q = qc, fin.qf = qfc, fin.k = K, fin.kf = KF, fin.v = V;
      fin.w = p.w, fin.anchor = p.anchor;
      fin.A = lc.A, fin.C = C, fin.a_end = lc.A.select(2, n - 1), fin.c_end = C.select(2, n - 1);
      auto r = fused_mlp_chunk(fin, opt.loss == "l2", /*inner_grad_clip=*/0);
      ys.push_back(r.y);
      p.w = r.w;
    } else {
      auto terms = window_terms(spec, opt, p.anchor, K, KF, V);
      DualCoefficients coef{lc.A, {}, C};
      ys.push_back(dual_form_readout(spec, p.w, {}, coef, terms, qc, {}, qfc));
      p.w = combine_state(p.w, {}, lc.A.select(2, n - 1), {}, terms, C.select(2, n - 1));
    }
    roll_buffers(p, c, K, KF, V, G);
    off += n;
    if (off == b) {
      off = 0;
      p.anchor = p.w;
    }
  }
  return finish(p, ys, in, off);
}

}  // namespace
}  // namespace atlas_detail

OmegaResult omega_chunk(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                        const OmegaState& init) {
  return atlas_detail::omega_chunk_impl(spec, opt, in, init, true);
}

OmegaResult omega_chunk_composed(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                                 const OmegaState& init) {
  return atlas_detail::omega_chunk_impl(spec, opt, in, init, false);
}

}  // namespace mnemo
