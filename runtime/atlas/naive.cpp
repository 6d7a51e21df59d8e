// Atlas GD family kernel (docs/models.md#dla-swla-and-omeganet): Omega token by token, the reference of the chunk
// form (chunk.cpp) and the decode step. The shared preparation is prepare.cpp (declared in omega.h).
#include "runtime/atlas/omega.h"
#include "runtime/kernels/precision.h"
#include "core/common.h"

namespace mnemo {

OmegaResult omega_recurrent(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                            const OmegaState& init) {
  using atlas_detail::bh, atlas_detail::finish, atlas_detail::prepare, atlas_detail::roll_buffers,
      atlas_detail::window_terms;
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  if (opt.muon) return atlas_muon_recurrent(spec, opt, in, init);
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto K = torch::cat({p.bk, bh(p.in.k, t, 1)}, 2), KF = torch::cat({p.bkf, bh(p.in.kf, t, 1)}, 2);
    auto V = torch::cat({p.bv, bh(p.in.v, t, 1)}, 2), G = torch::cat({p.bg, bh(p.in.gamma, t, 1)}, 2);
    // u_t = Σ_{i ∈ win(t)} γ_i ∇ℓ_i(M^0);  M_t = α_t M_{t-1} - η_t u_t
    auto u = weighted_outer_sum(window_terms(spec, opt, p.anchor, K, KF, V), G);
    auto e = [&](const torch::Tensor& x) { return x.select(1, t).unsqueeze(-1).unsqueeze(-1); };  // [B, H, 1, 1]
    for (size_t l = 0; l < p.w.size(); ++l) {
      auto w = p.in.log_alpha.defined() ? e(p.in.log_alpha).exp() * p.w[l] : p.w[l];
      p.w[l] = w - e(p.in.eta) * u[l];
    }
    ys.push_back(memory_apply(spec, p.w, bh(p.in.q, t, 1), {}, bh(p.in.qf, t, 1)));
    roll_buffers(p, c, K, KF, V, G);
    if (++off == b) {
      off = 0;
      p.anchor = p.w;
    }
  }
  return finish(p, ys, in, off);
}

}  // namespace mnemo
