// Deep-memory core (docs/models.md#deep-memory, docs/models.md#titans): forward with intermediates, closed-form inner
// gradients as rank-1 terms, the dual-form chunk read-out and the momentum/decay coefficients.
#include "runtime/deep_memory/memory.h"

#include "runtime/mixer.h"

#include <cmath>
#include <limits>

#include "core/common.h"
#include "runtime/kernels/gelu.h"

namespace mnemo {

namespace {

torch::Tensor t_(const torch::Tensor& w) { return w.transpose(-1, -2); }

// x [B, H, N, in] -> A ⊙ (x W^b^T) + D ⊙ (x S^b^T) - (C ⊙ (x R^T)) G  (one weight matrix of the dual form).
torch::Tensor dual_layer(const torch::Tensor& x, const torch::Tensor& base, const torch::Tensor& mom,
                         const DualCoefficients& coef, const torch::Tensor& cols, const torch::Tensor& rows) {
  auto out = coef.A.unsqueeze(-1) * torch::matmul(x, t_(base));
  if (mom.defined() && coef.D.defined()) out = out + coef.D.unsqueeze(-1) * torch::matmul(x, t_(mom));
  auto scores = coef.C * torch::matmul(x, t_(rows));  // [B, H, b, b], C is already lower-triangular
  return out - torch::matmul(scores, cols);
}

torch::Tensor layer_norm_affine(const torch::Tensor& n, const MemoryNorm& norm) {
  auto o = n;
  if (norm.gamma.defined()) o = o * norm.gamma;
  if (norm.beta.defined()) o = o + norm.beta;
  return o;
}

}  // namespace

MemoryKind memory_kind_from_string(const std::string& s, const std::string& field) {
  if (s == "linear") return MemoryKind::Linear;
  if (s == "mlp") return MemoryKind::ResidualMLP;
  if (s == "mlp_ln") return MemoryKind::ResidualMLP_LN;
  if (s == "gated_mlp") return MemoryKind::GatedMLP;
  throw Error(field + " must be \"linear\", \"mlp\", \"mlp_ln\" or \"gated_mlp\", got \"" + s + "\"");
}

std::string memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Linear: return "linear";
    case MemoryKind::ResidualMLP: return "mlp";
    case MemoryKind::ResidualMLP_LN: return "mlp_ln";
    case MemoryKind::GatedMLP: return "gated_mlp";
  }
  return "?";
}

std::vector<std::vector<int64_t>> DeepMemorySpec::weight_shapes() const {
  if (kind == MemoryKind::Linear) return {{d_out, feat()}};
  if (kind == MemoryKind::GatedMLP) return {{hidden(), feat()}, {hidden(), feat()}, {d_out, hidden()}};
  return {{hidden(), feat()}, {d_out, hidden()}};
}

void DeepMemorySpec::validate(const std::string& who) const {
  if (d_feat < 0) throw Error(who + ": d_feat must be >= 0, got " + std::to_string(d_feat));
  if (d_in < 1 || d_out < 1)
    throw Error(who + ": memory dimensions must be >= 1, got d_in " + std::to_string(d_in) + ", d_out " +
                std::to_string(d_out));
  if (kind != MemoryKind::Linear) {
    if (expansion < 1) throw Error(who + ": expansion must be >= 1, got " + std::to_string(expansion));
    if (d_in != d_out)
      throw Error(who + ": a residual memory needs d_in == d_out, got " + std::to_string(d_in) + " and " +
                  std::to_string(d_out));
  }
  if (kind == MemoryKind::ResidualMLP_LN && !(ln_eps > 0))
    throw Error(who + ": ln_eps must be > 0, got " + std::to_string(ln_eps));
}

MemoryWeights init_memory_weights(const DeepMemorySpec& spec, int64_t n_heads) {
  MemoryWeights w;
  for (const auto& s : spec.weight_shapes()) {
    const double bound = std::sqrt(6.0 / static_cast<double>(s[0] + s[1]));  // Xavier-uniform, fan_in + fan_out
    w.push_back(torch::empty({n_heads, s[0], s[1]}).uniform_(-bound, bound));
  }
  return w;
}

namespace {

// with_grad: also σ'(h) (the inner gradient needs it; memory_apply does not).
MemoryActivations forward_impl(const DeepMemorySpec& spec, const MemoryWeights& w, const torch::Tensor& z,
                               const MemoryNorm& norm, const torch::Tensor& z_feat, bool with_grad) {
  MemoryActivations a;
  const auto& zf = z_feat.defined() ? z_feat : z;
  if (spec.kind == MemoryKind::Linear) {
    a.inputs = {zf};
    a.out = torch::matmul(zf, t_(w[0]));
    return a;
  }
  a.h = torch::matmul(zf, t_(w[0]));
  if (with_grad) {
    auto g = gelu_and_grad(a.h);
    a.gelu = g.value;
    a.gelu_grad = g.grad;
  } else {
    a.gelu = gelu_safe(a.h);
  }
  if (spec.kind == MemoryKind::GatedMLP) {  // z + W_1 (GELU(W_2 z̃) ⊙ W_3 z̃)
    a.gate = torch::matmul(zf, t_(w[1]));
    auto act = a.gelu * a.gate;
    a.inputs = {zf, zf, act};
    a.out = z + torch::matmul(act, t_(w[2]));
    return a;
  }
  const auto& act = a.gelu;
  a.inputs = {zf, act};
  auto u = torch::matmul(act, t_(w[1]));
  if (spec.kind == MemoryKind::ResidualMLP) {
    a.out = z + u;
    return a;
  }
  a.u = u;
  auto mu = u.mean(-1, true);
  auto var = (u - mu).pow(2).mean(-1, true);
  a.s = torch::sqrt(var + spec.ln_eps);
  a.n = (u - mu) / a.s;
  a.out = z + layer_norm_affine(a.n, norm);
  return a;
}

}  // namespace

MemoryActivations memory_forward(const DeepMemorySpec& spec, const MemoryWeights& w, const torch::Tensor& z,
                                 const MemoryNorm& norm, const torch::Tensor& z_feat) {
  return forward_impl(spec, w, z, norm, z_feat, /*with_grad=*/true);
}

torch::Tensor memory_apply(const DeepMemorySpec& spec, const MemoryWeights& w, const torch::Tensor& z,
                           const MemoryNorm& norm, const torch::Tensor& z_feat) {
  return forward_impl(spec, w, z, norm, z_feat, /*with_grad=*/false).out;
}

RankOneTerms memory_grad_terms(const DeepMemorySpec& spec, const MemoryWeights& w, const MemoryActivations& acts,
                               const torch::Tensor& g_y, const MemoryNorm& norm) {
  RankOneTerms t;
  if (spec.kind == MemoryKind::Linear) {
    t.cols = {g_y};
    t.rows = {acts.inputs[0]};
    return t;
  }
  if (spec.kind == MemoryKind::GatedMLP) {  // r = W_1^T g_y (docs/models.md#deep-memory gated MLP)
    auto r = torch::matmul(g_y, w[2]);
    t.cols = {r * acts.gate * acts.gelu_grad, r * acts.gelu, g_y};  // ∂a/∂h = u ⊙ σ'(h)
    t.rows = {acts.inputs[0], acts.inputs[1], acts.inputs[2]};
    return t;
  }
  auto g_u = g_y;
  if (spec.kind == MemoryKind::ResidualMLP_LN) {
    auto gh = norm.gamma.defined() ? g_y * norm.gamma : g_y;
    g_u = (gh - gh.mean(-1, true) - acts.n * (gh * acts.n).mean(-1, true)) / acts.s;
  }
  auto delta = torch::matmul(g_u, w[1]) * acts.gelu_grad;  // (W_1^T g_u) ⊙ σ'(h)
  t.cols = {delta, g_u};
  t.rows = {acts.inputs[0], acts.inputs[1]};
  return t;
}

RankOneTerms clip_grad_terms(const RankOneTerms& terms, double tau) {
  if (!(tau > 0)) return terms;
  torch::Tensor sq;  // ||g_n||² [B, H, N]
  for (size_t l = 0; l < terms.cols.size(); ++l) {
    auto s = terms.cols[l].pow(2).sum(-1) * terms.rows[l].pow(2).sum(-1);
    sq = sq.defined() ? sq + s : s;
  }
  // τ / max(τ, ||g||) = τ · rsqrt(max(τ², ||g||²)): no sqrt at 0, so the backward stays finite.
  auto scale = (tau * torch::rsqrt(torch::clamp_min(sq, tau * tau))).unsqueeze(-1);
  RankOneTerms out;
  out.rows = terms.rows;
  for (const auto& c : terms.cols) out.cols.push_back(c * scale);
  return out;
}

MemoryWeights weighted_outer_sum(const RankOneTerms& terms, const torch::Tensor& c) {
  MemoryWeights out;
  for (size_t l = 0; l < terms.cols.size(); ++l)
    out.push_back(torch::matmul(t_(terms.cols[l] * c.unsqueeze(-1)), terms.rows[l]));
  return out;
}

MemoryWeights per_token_grads(const RankOneTerms& terms) {
  MemoryWeights out;
  for (size_t l = 0; l < terms.cols.size(); ++l) out.push_back(terms.cols[l].unsqueeze(-1) * terms.rows[l].unsqueeze(-2));
  return out;
}

void check_scalar_coefficients(const DualCoefficients& c) {
  if (!c.A.defined() || !c.C.defined()) throw Error("deep memory: dual-form coefficients A and C are required");
  if (c.A.dim() != 3) throw Error("deep memory: A must be [B, H, b] (channel-wise coefficients are not supported yet), got " + c10::str(c.A.sizes()));
  if (c.C.dim() != 4 || c.C.size(-2) != c.A.size(-1))
    throw Error("deep memory: C must be [B, H, b, N] with b = " + std::to_string(c.A.size(-1)) + ", got " +
                c10::str(c.C.sizes()));
  if (c.D.defined() && c.D.sizes() != c.A.sizes())
    throw Error("deep memory: D must have A's shape " + c10::str(c.A.sizes()) + ", got " + c10::str(c.D.sizes()));
}

torch::Tensor dual_form_readout(const DeepMemorySpec& spec, const MemoryWeights& base, const MemoryWeights& momentum,
                                const DualCoefficients& coef, const RankOneTerms& terms, const torch::Tensor& z,
                                const MemoryNorm& norm, const torch::Tensor& z_feat) {
  check_scalar_coefficients(coef);
  if (terms.cols.empty() || terms.cols[0].size(-2) != coef.C.size(-1))
    throw Error("deep memory: C has " + std::to_string(coef.C.size(-1)) + " term columns but the chunk has " +
                std::to_string(terms.cols.empty() ? 0 : terms.cols[0].size(-2)) + " rank-1 terms");
  auto mom = [&](size_t l) { return momentum.empty() ? torch::Tensor() : momentum[l]; };
  const auto& zf = z_feat.defined() ? z_feat : z;
  if (spec.kind == MemoryKind::Linear) return dual_layer(zf, base[0], mom(0), coef, terms.cols[0], terms.rows[0]);
  auto h = dual_layer(zf, base[0], mom(0), coef, terms.cols[0], terms.rows[0]);
  if (spec.kind == MemoryKind::GatedMLP) {
    auto g = dual_layer(zf, base[1], mom(1), coef, terms.cols[1], terms.rows[1]);
    return z + dual_layer(gelu_safe(h) * g, base[2], mom(2), coef, terms.cols[2], terms.rows[2]);
  }
  auto u = dual_layer(gelu_safe(h), base[1], mom(1), coef, terms.cols[1], terms.rows[1]);
  if (spec.kind == MemoryKind::ResidualMLP) return z + u;
  auto mu = u.mean(-1, true);
  auto var = (u - mu).pow(2).mean(-1, true);
  return z + layer_norm_affine((u - mu) / torch::sqrt(var + spec.ln_eps), norm);
}

MemoryWeights combine_state(const MemoryWeights& base, const MemoryWeights& momentum, const torch::Tensor& a,
                            const torch::Tensor& d, const RankOneTerms& terms, const torch::Tensor& c) {
  auto sum = weighted_outer_sum(terms, c);
  MemoryWeights out;
  for (size_t l = 0; l < base.size(); ++l) {
    auto w = a.unsqueeze(-1).unsqueeze(-1) * base[l];
    if (d.defined() && !momentum.empty()) w = w + d.unsqueeze(-1).unsqueeze(-1) * momentum[l];
    out.push_back(w - sum[l]);
  }
  return out;
}

MomentumChunkCoefficients momentum_chunk_coefficients(const torch::Tensor& log_keep, const torch::Tensor& log_eta,
                                                      const torch::Tensor& theta) {
  const int64_t b = theta.size(-1);
  auto tril = torch::ones({b, b}, theta.options().dtype(torch::kBool)).tril();
  const double neg_inf = -std::numeric_limits<double>::infinity();
  // exp(L_i - L_j) for j <= i, 0 above the diagonal (masked before exp: no inf · 0 in backward).
  auto masked_exp = [&](const torch::Tensor& L) {
    return (L.unsqueeze(-1) - L.unsqueeze(-2)).masked_fill(tril.logical_not(), neg_inf).exp();
  };
  MomentumChunkCoefficients r;
  torch::Tensor La = log_keep.defined() ? log_keep.cumsum(-1) : torch::zeros_like(theta);
  auto E1 = masked_exp(La);  // E1[i, m] = R_{m..i}
  r.dual.A = La.exp();       // R_{s-1..i}
  if (log_eta.defined()) {
    auto Le = log_eta.cumsum(-1);
    auto E2 = masked_exp(Le) * theta.unsqueeze(-2);  // E2[m, j] = θ_j P_{j+1..m}
    auto p = Le.exp();                               // P_{s..m}
    r.dual.C = torch::matmul(E1, E2);
    r.dual.D = torch::matmul(E1, p.unsqueeze(-1)).squeeze(-1);
    r.mom_keep = p;
    r.mom_c = E2;
  } else {
    r.dual.C = E1 * theta.unsqueeze(-2);  // E2 = diag(θ)
    r.mom_c = torch::diag_embed(theta);
  }
  return r;
}

void momentum_step(MemoryWeights& w, MemoryWeights& s, const torch::Tensor& keep, const torch::Tensor& eta,
                   const torch::Tensor& theta, const RankOneTerms& single_token_terms) {
  auto u = per_token_grads(single_token_terms);  // [B, H, 1, out, in]
  auto e = [](const torch::Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); };
  if (s.size() != w.size()) s.assign(w.size(), torch::Tensor());
  for (size_t l = 0; l < w.size(); ++l) {
    auto step = -e(theta) * u[l].squeeze(2);
    s[l] = (eta.defined() && s[l].defined()) ? e(eta) * s[l] + step : step;
    w[l] = (keep.defined() ? e(keep) * w[l] : w[l]) + s[l];
  }
}

MemoryWeights current_memory_weights(const MemoryWeights& init_weights, const std::string& key, LayerState* state,
                                     int64_t batch, torch::ScalarType dt) {
  MemoryWeights w;
  for (size_t l = 0; l < init_weights.size(); ++l) {
    const std::string name = key + "_w" + std::to_string(l);
    if (state && state->has(name)) {
      w.push_back(state->at(name).to(dt));
    } else {
      const auto& p = init_weights[l];
      w.push_back(p.to(dt).unsqueeze(0).expand({batch, p.size(0), p.size(1), p.size(2)}));
    }
  }
  return w;
}

}  // namespace mnemo
