// Token-by-token MesaNet (docs/models.md#mesanet), and what both forms share: the conjugate-gradient solver, the
// kernel with implicit gradients (a torch::autograd::Function over a MesaNetForm) and the input checks.
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/mesa_net/mesa_net.h"

namespace mnemo {

void check_mesa_net_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                           const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps) {
  if (!q.defined() || !k.defined() || !v.defined() || !g.defined() || !beta.defined() || !lambda.defined())
    throw Error("mesa_net: q, k, v, g, beta and lambda are required");
  if (q.dim() != 4) throw Error("mesa_net: q must be [B, T, H, K], got " + c10::str(q.sizes()));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  check_shape("mesa_net", "k", k, {B, T, H, K});
  check_shape("mesa_net", "v", v, {B, T, H, -1});
  check_shape("mesa_net", "g", g, {B, T, H});
  check_shape("mesa_net", "beta", beta, {B, T, H});
  check_shape("mesa_net", "lambda", lambda, {H, K});
  if (h_kk0.defined()) check_shape("mesa_net", "h_kk", h_kk0, {B, H, K, K});
  if (h_kv0.defined()) check_shape("mesa_net", "h_kv", h_kv0, {B, H, K, v.size(3)});
  if (cg_steps < 1) throw Error("mesa_net: cg_steps must be >= 1, got " + std::to_string(cg_steps));
}

torch::Tensor mesa_net_conjugate_gradient(const std::function<torch::Tensor(const torch::Tensor&)>& apply_a,
                                          const torch::Tensor& rhs, int64_t steps, double eps) {
  // eps is added to both denominators: a converged solve (δ → 0) takes no further step.
  if (recording_grad()) {  // out of place: autograd through the steps
    auto x = torch::zeros_like(rhs);
    auto r = rhs;  // residual rhs − A x at x = 0
    auto p = r;
    auto delta = (r * r).sum(-1, /*keepdim=*/true);
    for (int64_t i = 0; i < steps; ++i) {
      auto Ap = apply_a(p);
      auto alpha = delta / ((p * Ap).sum(-1, true) + eps);
      x = x + alpha * p;
      r = r - alpha * Ap;
      auto delta_new = (r * r).sum(-1, true);
      p = r + (delta_new / (delta + eps)) * p;
      delta = delta_new;
    }
    return x;
  }
  // The same steps, in place.
  auto x = torch::zeros_like(rhs);
  auto r = rhs.clone(), p = rhs.clone();
  auto delta = (r * r).sum(-1, true);
  for (int64_t i = 0; i < steps; ++i) {
    auto Ap = apply_a(p);
    auto alpha = delta / (p * Ap).sum(-1, true).add_(eps);
    x.add_(alpha * p);
    r.sub_(Ap.mul_(alpha));
    auto delta_new = (r * r).sum(-1, true);
    p.mul_(delta_new / (delta + eps)).add_(r);
    delta = delta_new;
  }
  return x;
}

namespace mesa_net_detail {

// Keeps the form (with its built operator) from the forward for the backward.
struct MesaNetFormHolder : torch::CustomClassHolder {
  explicit MesaNetFormHolder(std::shared_ptr<MesaNetForm> f) : form(std::move(f)) {}
  std::shared_ptr<MesaNetForm> form;
};

struct MesaNetImplicitFunction : torch::autograd::Function<MesaNetImplicitFunction> {
  // Inputs in the compute dtype, states defined.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                std::shared_ptr<MesaNetForm> form, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v,
                                                const torch::Tensor& g, const torch::Tensor& beta,
                                                const torch::Tensor& lambda, const torch::Tensor& h_kk0,
                                                const torch::Tensor& h_kv0, int64_t cg_steps, double cg_eps) {
    const int64_t T = q.size(1);
    form->build(k, beta, g, lambda, h_kk0);
    auto apply = [&](const torch::Tensor& p) { return form->apply(p); };
    auto x = form->from_layout(mesa_net_conjugate_gradient(apply, form->to_layout(q), cg_steps, cg_eps), T);
    auto [o, final_kv] = form->readout(x, k, v, g, beta, h_kv0);
    ctx->save_for_backward({k, v, g, beta, h_kk0, h_kv0, x});
    ctx->saved_data["form"] = c10::IValue::make_capsule(c10::make_intrusive<MesaNetFormHolder>(form));
    ctx->saved_data["cg_steps"] = cg_steps;
    ctx->saved_data["cg_eps"] = cg_eps;
    return {o, form->take_final_kk(), final_kv};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (torch::GradMode::is_enabled())  // the backward's own graph (create_graph) would miss the implicit terms
      throw Error("mesa_net: the implicit gradient has no second derivative (backward with create_graph); use "
                  "MesaNetGradient::kUnrolled");
    auto saved = ctx->get_saved_variables();
    const auto &k = saved[0], &v = saved[1], &g = saved[2], &beta = saved[3], &h_kk0 = saved[4], &h_kv0 = saved[5];
    const auto& x = saved[6];
    auto form = c10::static_intrusive_pointer_cast<MesaNetFormHolder>(ctx->saved_data["form"].toCapsule())->form;
    const int64_t steps = ctx->saved_data["cg_steps"].toInt();
    const double eps = ctx->saved_data["cg_eps"].toDouble();
    const int64_t T = x.size(1), K = k.size(3);
    const auto dt = x.scalar_type();
    auto d_o = grads[0].to(dt), d_kk = grads[1].to(dt), d_kv = grads[2].to(dt);

    torch::Tensor u;  // the adjoint solve u_t = A_t⁻¹ dx_t, dx_t = do_t G_tᵀ (A_t symmetric)
    {
      torch::NoGradGuard no_grad;
      auto dx = form->readout_grad(d_o, k, v, g, beta, h_kv0);
      auto apply = [&](const torch::Tensor& p) { return form->apply(p); };
      u = form->from_layout(mesa_net_conjugate_gradient(apply, form->to_layout(dx), steps, eps), T);
    }
    auto d_lambda = -(u * x).sum(at::IntArrayRef{0, 1});  // dA_t = −u_tᵀ x_t; its diagonal is λ's gradient

    // Through the state scans: Σ_t [do_t·(x_t G_t) − u_t·(x_t H_t)] + ⟨dH_T, H_T⟩ + ⟨dG_T, G_T⟩, x held fixed.
    torch::autograd::variable_list leaves = {k.detach().requires_grad_(), v.detach().requires_grad_(),
                                             g.detach().requires_grad_(), beta.detach().requires_grad_(),
                                             torch::cat({h_kk0, h_kv0}, -1).detach().requires_grad_()};
    torch::autograd::variable_list d;
    {
      torch::AutoGradMode enable(true);
      auto [outs, finals] = form->scan(x, leaves[0], leaves[1], leaves[2], leaves[3], leaves[4]);
      d = torch::autograd::grad({outs, finals}, leaves, {torch::cat({-u, d_o}, -1), torch::cat({d_kk, d_kv}, -1)});
    }
    auto d_kk0 = d[4].narrow(-1, 0, K), d_kv0 = d[4].narrow(-1, K, d[4].size(-1) - K);
    torch::autograd::variable_list out = {torch::Tensor(), u, d[0], d[1], d[2], d[3], d_lambda, d_kk0, d_kv0};
    out.emplace_back();  // cg_steps
    out.emplace_back();  // cg_eps
    return out;
  }
};

}  // namespace mesa_net_detail

MesaNetResult mesa_net_implicit(const std::shared_ptr<MesaNetForm>& form, const torch::Tensor& q,
                                const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                                const torch::Tensor& beta, const torch::Tensor& lambda, const torch::Tensor& h_kk0,
                                const torch::Tensor& h_kv0, int64_t cg_steps, double cg_eps) {
  auto r = mesa_net_detail::MesaNetImplicitFunction::apply(form, q, k, v, g, beta, lambda, h_kk0, h_kv0, cg_steps,
                                                           cg_eps);
  return {r[0], r[1], r[2]};
}

// Shared driver of both forms: inputs to the compute dtype, then the implicit kernel or autograd through the steps.
MesaNetResult mesa_net_run(const std::shared_ptr<MesaNetForm>& form, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, const torch::Tensor& g, const torch::Tensor& beta,
                           const torch::Tensor& lambda, const torch::Tensor& h_kk0, const torch::Tensor& h_kv0,
                           int64_t cg_steps, MesaNetGradient gradient, double cg_eps) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, g, beta, lambda, h_kk0, h_kv0});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const auto opts = q.options().dtype(dt);
  auto Hk0 = h_kk0.defined() ? h_kk0.to(dt) : torch::zeros({B, H, K, K}, opts);
  auto Gv0 = h_kv0.defined() ? h_kv0.to(dt) : torch::zeros({B, H, K, V}, opts);
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), Hk0, Gv0};
  auto qc = q.to(dt), kc = k.to(dt), vc = v.to(dt), gc = g.to(dt), bc = beta.to(dt), lam = lambda.to(dt);
  MesaNetResult r;
  if (gradient == MesaNetGradient::kImplicit) {
    r = mesa_net_implicit(form, qc, kc, vc, gc, bc, lam, Hk0, Gv0, cg_steps, cg_eps);
  } else {
    form->build(kc, bc, gc, lam, Hk0);
    auto apply = [&](const torch::Tensor& p) { return form->apply(p); };
    auto x = form->from_layout(mesa_net_conjugate_gradient(apply, form->to_layout(qc), cg_steps, cg_eps), T);
    auto [o, final_kv] = form->readout(x, kc, vc, gc, bc, Gv0);
    r = {o, form->take_final_kk(), final_kv};
  }
  r.o = r.o.to(v.scalar_type());
  return r;
}

namespace mesa_net_detail {

// Token by token: H_t and G_t for every t, stacked; A_t p_t = p_t H_t + λ ⊙ p_t (H_t symmetric).
class MesaNetRecurrentForm : public MesaNetForm {
 public:
  void build(const torch::Tensor& k, const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& lam,
             const torch::Tensor& h_kk0) override {
    Hs_ = states(k, beta, g, k, h_kk0, &final_kk_);
    lam_ = lam;
  }
  torch::Tensor to_layout(const torch::Tensor& x) const override { return x; }
  torch::Tensor from_layout(const torch::Tensor& x, int64_t) const override { return x; }
  torch::Tensor apply(const torch::Tensor& p) const override {
    return torch::matmul(p.unsqueeze(-2), Hs_).squeeze(-2) + lam_ * p;
  }
  torch::Tensor take_final_kk() override { return std::move(final_kk_); }
  std::pair<torch::Tensor, torch::Tensor> readout(const torch::Tensor& x, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& g,
                                                  const torch::Tensor& beta, const torch::Tensor& h_kv0) override {
    torch::Tensor final_kv;
    Gs_ = states(k, beta, g, v, h_kv0, &final_kv);
    return {torch::matmul(x.unsqueeze(-2), Gs_).squeeze(-2), final_kv};
  }
  torch::Tensor readout_grad(const torch::Tensor& d_o, const torch::Tensor&, const torch::Tensor&,
                             const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) override {
    return torch::matmul(d_o.unsqueeze(-2), Gs_.transpose(-1, -2)).squeeze(-2);  // Gs_ from the forward's readout
  }
  std::pair<torch::Tensor, torch::Tensor> scan(const torch::Tensor& x, const torch::Tensor& k,
                                               const torch::Tensor& v, const torch::Tensor& g,
                                               const torch::Tensor& beta, const torch::Tensor& h0) override {
    torch::Tensor final_state;
    auto S = states(k, beta, g, torch::cat({k, v}, -1), h0, &final_state);
    return {torch::matmul(x.unsqueeze(-2), S).squeeze(-2), final_state};
  }

 private:
  // S_t = e^{g_t} S_{t-1} + β_t k_tᵀ w_t for every t, stacked [B, T, H, K, W]; *last = S_T.
  static torch::Tensor states(const torch::Tensor& k, const torch::Tensor& beta, const torch::Tensor& g,
                              const torch::Tensor& w, const torch::Tensor& s0, torch::Tensor* last) {
    const int64_t T = k.size(1);
    auto kb = k * beta.unsqueeze(-1);  // β_t k_t
    auto decay = g.exp();              // [B, T, H]
    auto S = s0;
    std::vector<torch::Tensor> all;
    all.reserve(T);
    for (int64_t t = 0; t < T; ++t) {
      auto gamma = decay.select(1, t).unsqueeze(-1).unsqueeze(-1);            // [B, H, 1, 1]
      S = gamma * S + kb.select(1, t).unsqueeze(-1) * w.select(1, t).unsqueeze(-2);  // β_t k_tᵀ w_t
      all.push_back(S);
    }
    *last = S;
    return torch::stack(all, 1);
  }

  torch::Tensor Hs_, Gs_, final_kk_, lam_;
};

}  // namespace mesa_net_detail

MesaNetResult mesa_net_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                                 const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                                 MesaNetGradient gradient, double cg_eps) {
  check_mesa_net_inputs(q, k, v, g, beta, lambda, h_kk0, h_kv0, cg_steps);
  return mesa_net_run(std::make_shared<mesa_net_detail::MesaNetRecurrentForm>(), q, k, v, g, beta, lambda, h_kk0,
                      h_kv0, cg_steps, gradient, cg_eps);
}

}  // namespace mnemo
