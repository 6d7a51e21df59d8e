// ATLAS / ATLAS++ kernels (docs/models.md#atlas): the Omega objective optimised by Muon with weight decay,
//   u_t = Σ_{i ∈ win(t)} γ_i ∇ℓ_i(M^0),  S_t = θ_t S_{t-1} + u_t,  M_t = α_t M_{t-1} - η_t NS_k(S_t).
// The chunk loop (one muon_chunk_piece per chunk, muon_chunk.cpp) and the token-by-token reference / decode step;
// Newton–Schulz-k in newton_schulz.cpp. Options readout / ns_granularity: omega.h.
#include "runtime/atlas/omega.h"
#include "core/common.h"
#include "runtime/kernels/chunking.h"

namespace mnemo {

using namespace atlas_detail;

namespace {
torch::Tensor e1(const torch::Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); }  // [B, H] -> [B, H, 1, 1]
}  // namespace

OmegaResult atlas_muon_chunk(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                             const OmegaState& init) {
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  const auto sizes = chunk_piece_sizes(T, b, off);
  const auto pieces = split_inputs(p.in, sizes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const auto& x = pieces[i];
    auto K = torch::cat({p.bk, x.k}, 2), KF = torch::cat({p.bkf, x.kf}, 2);
    auto V = torch::cat({p.bv, x.v}, 2), G = torch::cat({p.bg, x.gamma}, 2);
    ys.push_back(muon_chunk_piece(spec, opt, p, K, KF, V, G, x.q, x.qf, x.log_theta, x.log_alpha, x.eta));
    roll_buffers(p, c, K, KF, V, G);
    off += n;
    if (off == b) {
      off = 0;
      p.anchor = p.w;
      if (opt.ns_granularity == "chunk") {
        p.ns_decay = torch::ones_like(p.ns_decay);
        p.ns_step = torch::zeros_like(p.ns_step);
      }
    }
  }
  return finish(p, ys, in, off);
}

OmegaResult atlas_muon_recurrent(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in,
                                 const OmegaState& init) {
  auto p = prepare(spec, opt, in, init);
  const int64_t T = in.q.size(1), b = opt.chunk, c = opt.window;
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    auto K = torch::cat({p.bk, bh(p.in.k, t, 1)}, 2), KF = torch::cat({p.bkf, bh(p.in.kf, t, 1)}, 2);
    auto V = torch::cat({p.bv, bh(p.in.v, t, 1)}, 2), G = torch::cat({p.bg, bh(p.in.gamma, t, 1)}, 2);
    auto u = weighted_outer_sum(window_terms(spec, opt, p.anchor, K, KF, V), G);
    auto e = [&](const torch::Tensor& x) { return x.select(1, t).unsqueeze(-1).unsqueeze(-1); };  // [B, H, 1, 1]
    const bool chunk_ns = opt.ns_granularity == "chunk";
    if (chunk_ns) {  // A_{s..t} = α_t A_{s..t-1},  c_t = α_t c_{t-1} + η_t
      auto alpha = p.in.log_alpha.defined() ? p.in.log_alpha.select(1, t).exp() : torch::ones_like(p.ns_decay);
      p.ns_decay = alpha * p.ns_decay;
      p.ns_step = alpha * p.ns_step + p.in.eta.select(1, t);
    }
    const bool chunk_end = off + 1 == b || t == T - 1;  // where M_t is needed with chunk-granularity NS
    for (size_t l = 0; l < p.w.size(); ++l) {
      p.s[l] = e(p.in.log_theta).exp() * p.s[l] + u[l];
      if (chunk_ns) {
        if (chunk_end)
          p.w[l] = e1(p.ns_decay) * p.anchor[l] - e1(p.ns_step) * newton_schulz(p.s[l], opt.ns_steps, opt.ns_precision == "bf16");
        continue;
      }
      auto w = p.in.log_alpha.defined() ? e(p.in.log_alpha).exp() * p.w[l] : p.w[l];
      p.w[l] = w - e(p.in.eta) * newton_schulz(p.s[l], opt.ns_steps, opt.ns_precision == "bf16");
    }
    const auto& read = opt.readout == "token" ? p.w : p.anchor;  // chunk_start: y_t = M^0(φ(q_t))
    ys.push_back(memory_apply(spec, read, bh(p.in.q, t, 1), {}, bh(p.in.qf, t, 1)));
    roll_buffers(p, c, K, KF, V, G);
    if (++off == b) {
      off = 0;
      p.anchor = p.w;
      if (chunk_ns) {
        p.ns_decay = torch::ones_like(p.ns_decay);
        p.ns_step = torch::zeros_like(p.ns_step);
      }
    }
  }
  return finish(p, ys, in, off);
}

}  // namespace mnemo
