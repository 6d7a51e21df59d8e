// Newton–Schulz-k (docs/models.md#newton-schulz-orthogonalisation) for the ATLAS kernels: one batch of fused matmuls per matrix shape, the
// wide orientation (Muon's transpose trick: iterate on the r × r Gram side, r = min(rows, cols)), and a
// hand-written adjoint of the polynomial iterations so autograd keeps X, A, B per iteration only.
//   forward   A = X Xᵀ,  B = b A + c A²,  Y = a X + B X
//   adjoint   X̄ = a Ȳ + B Ȳ + (b Σ + c (Σ A + A Σ)) X,   Σ = B̄ + B̄ᵀ,  B̄ = Ȳ Xᵀ    (A, B symmetric)
#include <torch/torch.h>

#include "runtime/atlas/omega.h"
#include "core/common.h"

namespace mnemo {

namespace {

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

torch::Tensor tr(const torch::Tensor& x) { return x.transpose(1, 2); }

// One iteration on X [N, r, c] (r <= c); A and B returned for the adjoint.
torch::Tensor ns_iteration(const torch::Tensor& X, torch::Tensor& A, torch::Tensor& B) {
  A = torch::bmm(X, tr(X));
  B = torch::baddbmm(A, A, A, /*beta=*/kB, /*alpha=*/kC);  // b A + c A²
  return torch::baddbmm(X, B, X, /*beta=*/kA, /*alpha=*/1.0);  // a X + B X
}

struct NsPolynomial : torch::autograd::Function<NsPolynomial> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& X0, int64_t steps) {
    std::vector<torch::Tensor> saved;
    auto X = X0;
    for (int64_t i = 0; i < steps; ++i) {
      torch::Tensor A, B;
      auto Y = ns_iteration(X, A, B);
      saved.insert(saved.end(), {X, A, B});
      X = Y;
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["steps"] = steps;
    return X;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const int64_t steps = ctx->saved_data["steps"].toInt();
    auto gY = grad[0];
    for (int64_t i = steps - 1; i >= 0; --i) {
      const auto &X = saved[3 * i], &A = saved[3 * i + 1], &B = saved[3 * i + 2];
      auto Bbar = torch::bmm(gY, tr(X));
      auto Sig = Bbar + tr(Bbar);
      auto SA = torch::bmm(Sig, A);
      auto Abar = kB * Sig + kC * (SA + tr(SA));  // Ā + Āᵀ
      auto gX = torch::baddbmm(gY, B, gY, /*beta=*/kA, /*alpha=*/1.0);
      gY = torch::baddbmm(gX, Abar, X);
    }
    return {gY, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor newton_schulz(const torch::Tensor& G, int64_t steps, bool bf16) {
  std::vector<int64_t> dims = {-2, -1};
  auto X = G / (torch::linalg_vector_norm(G, 2, torch::IntArrayRef(dims), true, c10::nullopt) + 1e-7);
  if (steps <= 0 || G.numel() == 0) return X;
  const bool wide = G.size(-2) <= G.size(-1);
  if (!wide) X = X.transpose(-1, -2);
  const auto shape = X.sizes().vec();
  auto X3 = X.reshape({-1, shape[shape.size() - 2], shape.back()}).contiguous();
  if (bf16) X3 = X3.to(torch::kBFloat16);
  if (torch::GradMode::is_enabled() && X3.requires_grad()) {
    X3 = NsPolynomial::apply(X3, steps);
  } else {
    torch::Tensor A, B;
    for (int64_t i = 0; i < steps; ++i) X3 = ns_iteration(X3, A, B);
  }
  auto out = X3.to(G.scalar_type()).view(shape);
  return wide ? out : out.transpose(-1, -2);
}

void check_muon_options(const OmegaOptions& opt, const std::string& who) {
  if (opt.readout != "token" && opt.readout != "chunk_start")
    throw Error(who + ": atlas_readout must be \"token\" or \"chunk_start\", got \"" + opt.readout + "\"");
  if (opt.ns_granularity != "token" && opt.ns_granularity != "chunk")
    throw Error(who + ": ns_granularity must be \"token\" or \"chunk\", got \"" + opt.ns_granularity + "\"");
  if (opt.ns_precision != "fp32" && opt.ns_precision != "bf16")
    throw Error(who + ": ns_precision must be \"fp32\" or \"bf16\", got \"" + opt.ns_precision + "\"");
  if (opt.ns_granularity == "chunk" && opt.readout != "chunk_start")
    throw Error(who + ": ns_granularity = \"chunk\" needs atlas_readout = \"chunk_start\" (a token read-out would see "
                      "the chunk's later tokens through NS(S_end)), got atlas_readout = \"" + opt.readout + "\"");
}

}  // namespace mnemo
