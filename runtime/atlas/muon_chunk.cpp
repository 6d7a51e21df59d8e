// One chunk piece of the ATLAS / ATLAS++ chunk form (docs/models.md#atlas steps 1–5) and its recomputing autograd
// node. With the window terms col_i row_iᵀ at the anchor M^0 (i over the N = n + c - 1 window positions):
//   S_t = Θ_{s..t} S^0 + Σ_i (Θ ∘ M_s γ)[t, i] col_i row_iᵀ      (steps 1+2 in one batched outer-product sum)
//   O_t = NS_k(S_t)                                              (step 3, one batch per weight shape)
//   M_t = A_t M^b - Σ_{j<=t} L[t, j] η_j O_j,  y_t = M_t(φ(q_t))  (steps 4–5)
// Recompute: the forward runs without a graph and saves only the piece's inputs (window arrays, queries, gates,
// the states before it); the backward reruns the body with autograd and back-propagates through it. Peak memory
// then holds one chunk's per-token weights and NS iterates, not T of them.
#include <torch/torch.h>

#include "runtime/atlas/omega.h"
#include "runtime/kernels/precision.h"
#include "core/common.h"

namespace mnemo {
namespace atlas_detail {

namespace {

torch::Tensor e1(const torch::Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); }  // [B, H] -> [B, H, 1, 1]

// Inputs: anchor (L), w (L), s (L), K, KF, V, G, qc, qfc, lth, la, eta[, ns_decay, ns_step];
// outputs: y, w_end (L), s_end (L)[, ns_decay_end, ns_step_end].
std::vector<torch::Tensor> chunk_body(const DeepMemorySpec& spec, const OmegaOptions& opt,
                                      const std::vector<torch::Tensor>& x) {
  const size_t L = spec.num_weights();
  const MemoryWeights anchor(x.begin(), x.begin() + L), w(x.begin() + L, x.begin() + 2 * L),
      s(x.begin() + 2 * L, x.begin() + 3 * L);
  size_t i = 3 * L;
  const auto &K = x[i], &KF = x[i + 1], &V = x[i + 2], &G = x[i + 3], &qc = x[i + 4], &qfc = x[i + 5];
  const auto &lth = x[i + 6], &la = x[i + 7], &eta = x[i + 8];
  const int64_t n = qc.size(2), last = n - 1;
  auto terms = window_terms(spec, opt, anchor, K, KF, V);
  auto Gm = band_mask(n, opt.window, K.options()) * G.unsqueeze(-2);  // [B, H, n, N]: M_s[t, i] γ_i
  // Θ_{s..t} and Θ_{j+1..t}; SC[t, i] = Σ_j Θ_{j+1..t} M_s[j, i] γ_i, the weight of term i in S_t.
  auto mom = momentum_chunk_coefficients(lth, {}, torch::ones_like(lth)).dual;
  auto dec = momentum_chunk_coefficients(la, {}, eta).dual;  // A_t = Π α, C[t, j] = L[t, j] η_j
  std::vector<torch::Tensor> out(1 + 2 * L);
  if (opt.ns_granularity == "chunk") {  // one Muon step per chunk: M_t = A_{s..t} M^0 - c_t NS(S_t)
    const auto& decay0 = x[i + 9];
    const auto& step0 = x[i + 10];
    auto a_end = decay0 * dec.A.select(2, last);
    auto c_end = step0 * dec.A.select(2, last) + dec.C.select(2, last).sum(-1);
    // Only S at the chunk's last token is needed: SC's last row, [B, H, 1, n] x [B, H, n, N].
    auto sc_last = torch::matmul(mom.C.narrow(2, last, 1), Gm).squeeze(2);
    auto u = weighted_outer_sum(terms, sc_last);
    for (size_t l = 0; l < L; ++l) {
      auto S = e1(mom.A.select(2, last)) * s[l] + u[l];
      out[1 + L + l] = S;
      out[1 + l] = e1(a_end) * anchor[l] - e1(c_end) * newton_schulz(S, opt.ns_steps, opt.ns_precision == "bf16");
    }
    out[0] = memory_apply(spec, anchor, qc, {}, qfc);
    out.push_back(a_end);
    out.push_back(c_end);
    return out;
  }
  const bool token_read = opt.readout == "token";
  auto SC = torch::matmul(mom.C, Gm);
  MemoryWeights W_all;
  for (size_t l = 0; l < L; ++l) {
    // S_t for every token: [B, H, n, out, in] as n batched [out, N] x [N, in] products.
    auto S = e1(mom.A) * s[l].unsqueeze(2) +
             torch::matmul((SC.unsqueeze(-1) * terms.cols[l].unsqueeze(2)).transpose(-1, -2),
                           terms.rows[l].unsqueeze(2));
    auto shp = S.sizes().vec();
    auto O = newton_schulz(S, opt.ns_steps, opt.ns_precision == "bf16").reshape({shp[0], shp[1], n, shp[3] * shp[4]});
    if (token_read) {
      auto W = e1(dec.A) * w[l].unsqueeze(2) - torch::matmul(dec.C, O).view(shp);
      W_all.push_back(W);
      out[1 + l] = W.select(2, last).clone();  // a copy: a view would keep the chunk's per-token W alive
    } else {
      auto sum = torch::matmul(dec.C.select(2, last).unsqueeze(-2), O).view({shp[0], shp[1], shp[3], shp[4]});
      out[1 + l] = e1(dec.A.select(2, last)) * w[l] - sum;
    }
    out[1 + L + l] = S.select(2, last).clone();
  }
  out[0] = token_read ? memory_apply(spec, W_all, qc.unsqueeze(-2), {}, qfc.unsqueeze(-2)).squeeze(-2)
                      : memory_apply(spec, anchor, qc, {}, qfc);
  return out;
}

// The non-tensor arguments of chunk_body, kept in the autograd context.
std::vector<int64_t> encode(const DeepMemorySpec& spec, const OmegaOptions& opt) {
  return {static_cast<int64_t>(spec.kind), spec.d_in, spec.d_out, spec.expansion, spec.d_feat,
          opt.loss == "dot" ? 1 : 0, opt.window, opt.chunk, opt.ns_steps, opt.readout == "chunk_start" ? 1 : 0,
          opt.ns_granularity == "chunk" ? 1 : 0, opt.ns_precision == "bf16" ? 1 : 0};
}

void decode(const std::vector<int64_t>& m, double ln_eps, DeepMemorySpec& spec, OmegaOptions& opt) {
  spec.kind = static_cast<MemoryKind>(m[0]);
  spec.d_in = m[1];
  spec.d_out = m[2];
  spec.expansion = m[3];
  spec.d_feat = m[4];
  spec.ln_eps = ln_eps;
  opt.loss = m[5] ? "dot" : "l2";
  opt.window = m[6];
  opt.chunk = m[7];
  opt.ns_steps = m[8];
  opt.readout = m[9] ? "chunk_start" : "token";
  opt.ns_granularity = m[10] ? "chunk" : "token";
  opt.ns_precision = m[11] ? "bf16" : "fp32";
  opt.muon = true;
}

struct RecomputedChunk : torch::autograd::Function<RecomputedChunk> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                std::vector<int64_t> meta, double ln_eps) {
    ctx->set_materialize_grads(false);
    std::vector<torch::Tensor> x(inputs.begin(), inputs.end());
    ctx->save_for_backward(x);
    ctx->saved_data["meta"] = meta;
    ctx->saved_data["ln_eps"] = ln_eps;
    DeepMemorySpec spec;
    OmegaOptions opt;
    decode(meta, ln_eps, spec, opt);
    return chunk_body(spec, opt, x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    DeepMemorySpec spec;
    OmegaOptions opt;
    decode(ctx->saved_data["meta"].toIntVector(), ctx->saved_data["ln_eps"].toDouble(), spec, opt);
    std::vector<torch::Tensor> x, wrt;
    std::vector<size_t> wrt_index;
    for (size_t i = 0; i < saved.size(); ++i) {
      auto t = saved[i].detach();
      if (ctx->needs_input_grad(i)) {
        t.requires_grad_(true);
        wrt.push_back(t);
        wrt_index.push_back(i);
      }
      x.push_back(t);
    }
    torch::autograd::variable_list result(saved.size() + 2);  // + meta, ln_eps
    std::vector<torch::Tensor> outs, gouts;
    torch::AutoGradMode grad_on(true);
    const AutocastOff autocast_off;
    auto y = chunk_body(spec, opt, x);
    for (size_t i = 0; i < y.size() && i < grads.size(); ++i)
      if (grads[i].defined() && y[i].requires_grad()) {
        outs.push_back(y[i]);
        gouts.push_back(grads[i]);
      }
    if (outs.empty() || wrt.empty()) return result;
    auto g = torch::autograd::grad(outs, wrt, gouts, /*retain_graph=*/false, /*create_graph=*/false,
                                   /*allow_unused=*/true);
    for (size_t k = 0; k < g.size(); ++k) result[wrt_index[k]] = g[k];
    return result;
  }
};

}  // namespace

torch::Tensor muon_chunk_piece(const DeepMemorySpec& spec, const OmegaOptions& opt, Prepared& p,
                               const torch::Tensor& K, const torch::Tensor& KF, const torch::Tensor& V,
                               const torch::Tensor& G, const torch::Tensor& qc, const torch::Tensor& qfc,
                               const torch::Tensor& lth, const torch::Tensor& la, const torch::Tensor& eta) {
  const size_t L = p.w.size();
  std::vector<torch::Tensor> x;
  x.insert(x.end(), p.anchor.begin(), p.anchor.end());
  x.insert(x.end(), p.w.begin(), p.w.end());
  x.insert(x.end(), p.s.begin(), p.s.end());
  x.insert(x.end(), {K, KF, V, G, qc, qfc, lth, la.defined() ? la : torch::zeros_like(eta), eta});
  const bool chunk_ns = opt.ns_granularity == "chunk";
  if (chunk_ns) x.insert(x.end(), {p.ns_decay, p.ns_step});
  bool any_grad = false;
  for (const auto& t : x) any_grad = any_grad || t.requires_grad();
  std::vector<torch::Tensor> y;
  if (opt.recompute && any_grad && torch::GradMode::is_enabled())
    y = RecomputedChunk::apply(at::TensorList(x), encode(spec, opt), spec.ln_eps);
  else
    y = chunk_body(spec, opt, x);
  for (size_t l = 0; l < L; ++l) {
    p.w[l] = y[1 + l];
    p.s[l] = y[1 + L + l];
  }
  if (chunk_ns) {
    p.ns_decay = y[1 + 2 * L];
    p.ns_step = y[2 + 2 * L];
  }
  return y[0];
}

}  // namespace atlas_detail
}  // namespace mnemo
