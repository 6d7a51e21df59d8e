// Kernel op `titans` in the fixture format (shared/fixtures/kernels/README.md, fla's titans_linear):
// a linear memory M [D, D] (row form, õ = q M) with an inner LayerNorm loss, momentum and decay:
//   z = k_t M̄,  r = sqrt(var(z) + eps),  ẑ = (z - mean z) / r,  g = w ⊙ (w ⊙ ẑ + b - (v_t - k_t))
//   u = D g - (Σ_j g_j) / (r D) - ẑ (Σ_j g_j ẑ_j) / (r D)          (the reference's form, kept as is)
//   Mom_t = η_t Mom_{t-1} - 2 θ_t k_t^T u,   M_t = (1 - α_t) M_{t-1} + Mom_t
//   õ_t = q_t M_t,   o_t = õ_t + w ⊙ LN(õ_t) + b;   M̄ ← M_t after every c-th token (c = chunk_size).
// Forms: "recurrent" (token by token) and "dual": per chunk of c tokens all u from the chunk's anchor at
// once, then the momentum/decay recurrence in closed form with the deep-memory coefficients
// (runtime/deep_memory: S_t = η S - θ' u, W_t = (1-α) W + S with θ' = 2θ, column form W = M^T,
// rank-1 terms col = u, row = k) and the dual-form read-out. The chunk size is part of the math (the
// anchor refresh), so neither form is swept over chunk sizes. No padding: a last partial chunk stays
// partial (the fixtures' outputs come from the unpadded recurrent reference).
#include <cmath>

#include "runtime/deep_memory/memory.h"
#include "runtime/kernels/op_helpers.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

// A named namespace, not an anonymous one: in a unity build this file shares a translation unit with other
// runtime/ sources, whose file-local helpers (an `input`, a `prepare`, ...) would clash with these.
namespace titans_op {

torch::Tensor input(const TensorMap& in, const std::string& name) {
  return kernel_op_args::required(in, "titans", name);
}

torch::Tensor layer_norm_noaffine(const torch::Tensor& x, double eps) {
  auto mu = x.mean(-1, true);
  auto var = (x - mu).pow(2).mean(-1, true);
  return (x - mu) / torch::sqrt(var + eps);
}

// u for tokens k, v [B, H, n, D] against the anchor M̄ [B, H, D, D] (row form).
torch::Tensor inner_grad_u(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& anchor,
                           const torch::Tensor& w, const torch::Tensor& b, double eps) {
  const double D = static_cast<double>(k.size(-1));
  auto z = torch::matmul(k, anchor);
  auto mu = z.mean(-1, true);
  auto r = torch::sqrt((z - mu).pow(2).mean(-1, true) + eps);
  auto zh = (z - mu) / r;
  auto g = w * (w * zh + b - (v - k));
  return D * g - g.sum(-1, true) / (r * D) - zh * (g * zh).sum(-1, true) / (r * D);
}

struct Prepared {
  torch::Tensor q, k, v, w, b, theta, alpha, eta, M0;  // [B, H, T, ...] layouts, w/b [1, H, 1, D]
  int64_t chunk = 16;
  double eps = 1e-6;
};

Prepared prepare(const TensorMap& in, const json& params) {
  auto q = input(in, "q");
  if (q.dim() != 4) throw Error("kernel op titans: q must be [B,T,H,D], got " + c10::str(q.sizes()));
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), H = q.size(2), D = q.size(3);
  auto bth = [&](const std::string& n) {
    auto t = input(in, n);
    if (t.dim() != 4 || t.size(3) != 1)
      throw Error("kernel op titans: " + n + " must be [B,T,H,1], got " + c10::str(t.sizes()));
    return t.to(dt).squeeze(-1).transpose(1, 2);  // [B, H, T]
  };
  Prepared p;
  p.q = q.to(dt).transpose(1, 2);
  p.k = input(in, "k").to(dt).transpose(1, 2);
  p.v = input(in, "v").to(dt).transpose(1, 2);
  if (p.k.sizes() != p.q.sizes() || p.v.sizes() != p.q.sizes())
    throw Error("kernel op titans: q, k, v must share the shape [B,T,H,D] (the reference needs K == V)");
  p.w = input(in, "w").to(dt).view({1, H, 1, D});
  p.b = input(in, "b").to(dt).view({1, H, 1, D});
  p.theta = bth("theta");
  p.alpha = bth("alpha");
  p.eta = bth("eta");
  p.M0 = in.count("initial_state") ? in.at("initial_state").to(dt) : torch::zeros({B, H, D, D}, p.q.options());
  if (params.is_object() && params.contains("eps")) p.eps = params.at("eps").get<double>();
  if (params.is_object() && params.contains("chunk_size")) {
    const auto& c = params.at("chunk_size");
    if (!c.is_number_integer() || c.get<int64_t>() < 1)
      throw Error("kernel op titans: params.chunk_size must be a positive integer, got " + json_excerpt(c));
    p.chunk = c.get<int64_t>();
  }
  return p;
}

TensorMap finish(const Prepared& p, const std::vector<torch::Tensor>& outs, const torch::Tensor& M) {
  auto o_tilde = torch::cat(outs, 2);  // [B, H, T, D]
  auto o = o_tilde + p.w * layer_norm_noaffine(o_tilde, p.eps) + p.b;
  return {{"o", o.transpose(1, 2).contiguous()}, {"final_state", M}};
}

TensorMap run_recurrent(const Prepared& p) {
  const int64_t T = p.q.size(2);
  auto M = p.M0, anchor = p.M0, mom = torch::zeros_like(p.M0);
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    auto k_t = p.k.narrow(2, t, 1), v_t = p.v.narrow(2, t, 1), q_t = p.q.narrow(2, t, 1);  // [B, H, 1, D]
    auto at = [&](const torch::Tensor& x) { return x.narrow(2, t, 1).unsqueeze(-1); };  // [B, H, 1, 1]
    auto u = inner_grad_u(k_t, v_t, anchor, p.w, p.b, p.eps);
    mom = at(p.eta) * mom - 2.0 * at(p.theta) * torch::matmul(k_t.transpose(-1, -2), u);
    M = (1.0 - at(p.alpha)) * M + mom;
    outs.push_back(torch::matmul(q_t, M));
    if ((t + 1) % p.chunk == 0) anchor = M;
  }
  return finish(p, outs, M);
}

TensorMap run_dual(const Prepared& p) {
  const int64_t T = p.q.size(2), D = p.q.size(3);
  DeepMemorySpec spec;
  spec.kind = MemoryKind::Linear;
  spec.d_in = spec.d_out = D;
  MemoryWeights W = {p.M0.transpose(-1, -2)};                   // column form W = M^T
  MemoryWeights S = {torch::zeros_like(p.M0)};                  // momentum (column form)
  std::vector<torch::Tensor> outs;
  for (int64_t t0 = 0; t0 < T; t0 += p.chunk) {
    const int64_t n = std::min(p.chunk, T - t0);
    auto kc = p.k.narrow(2, t0, n), vc = p.v.narrow(2, t0, n), qc = p.q.narrow(2, t0, n);
    auto u = inner_grad_u(kc, vc, W[0].transpose(-1, -2), p.w, p.b, p.eps);  // anchor = chunk-start M
    RankOneTerms terms{{u}, {kc}};                                           // ∇ (column form) = u k^T
    auto coef = momentum_chunk_coefficients(torch::log1p(-p.alpha.narrow(2, t0, n)),
                                            torch::log(p.eta.narrow(2, t0, n)), 2.0 * p.theta.narrow(2, t0, n));
    outs.push_back(dual_form_readout(spec, W, S, coef.dual, terms, qc));  // õ_t = W_t q_t
    auto last = [&](const torch::Tensor& x) { return x.select(2, n - 1); };
    auto W_end = combine_state(W, S, last(coef.dual.A), last(coef.dual.D), terms, last(coef.dual.C));
    S = combine_state(S, {}, last(coef.mom_keep), torch::Tensor(), terms, last(coef.mom_c));
    W = W_end;
  }
  return finish(p, outs, W[0].transpose(-1, -2));
}

TensorMap run_titans(const TensorMap& in, const json& params, const std::string& form, int64_t) {
  auto p = prepare(in, params);
  if (form == "recurrent") return run_recurrent(p);
  if (form == "dual") return run_dual(p);
  throw Error("kernel op titans: unknown form '" + form + "' (forms: recurrent, dual)");
}

}  // namespace titans_op

void register_titans_ops(KernelOpRegistry& r) {
  // Bench inputs: theta, alpha, eta ~ U(0, 1) (the fixture's range), w = 1, b = 0, chunk 16.
  r.add({"titans", {"recurrent", "dual"}, titans_op::run_titans, [](int64_t B, int64_t T, int64_t H, int64_t D) {
           namespace kb = kernel_bench;
           return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                     {"v", kb::normal({B, T, H, D})}, {"w", torch::ones({H, D})},
                                     {"b", torch::zeros({H, D})}, {"theta", torch::rand({B, T, H, 1})},
                                     {"alpha", torch::rand({B, T, H, 1})}, {"eta", torch::rand({B, T, H, 1})}},
                                    {{"chunk_size", 16}}};
         }});
}

}  // namespace mnemo
