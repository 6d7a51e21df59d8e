// Chunked MesaNet (docs/models.md#mesanet). With the scalar decay, both states are scalar-decay linear attention
// memories: for any "query" p_t,
//   p_t H_t = Σ_{s<=t} e^{c_t − c_s} (p_t · k_s) β_s k_s + e^{c_t} p_t H_0,   c_t = Σ_{r<=t} g_r
// which is simple GLA (runtime/retnet/retnet.h: S_t = e^{g_t} S_{t-1} + k̃_tᵀ ṽ_t, o_t = p_t S_t) with key k̃ = β k,
// value ṽ = k and initial state H_0; H_t is symmetric, so p_t H_t = (H_t p_tᵀ)ᵀ. Nothing of that scan but the query
// changes between CG steps, so H's chunk-start states S_n, the in-chunk decays and the decayed keys are built once;
// per chunk n with b the in-chunk cumulative log decay, a CG step is
//   P H = (P ⊙ e^{b}) S_n + tril((P ⊙ e^{b}) (β K ⊙ e^{−b})ᵀ) K
// with the two products of P ⊙ e^{b} done as one matmul against [(β K ⊙ e^{−b})ᵀ | S_n]
// (the masked-difference form of runtime/retnet/chunk.cpp when the decay span is too wide to factorise). The readout
// o_t = x_t G_t is one simple_gla_chunk call with value ṽ = v and initial state G_0.
#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/mesa_net/mesa_net.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

namespace mesa_net_detail {

// CG runs on [B, H, N, C, K] chunks (zero-padded tokens have q = 0, hence x = 0, and touch no other token).
class MesaNetChunkForm : public MesaNetForm {
 public:
  explicit MesaNetChunkForm(int64_t chunk_size) : chunk_size_(chunk_size) {}

  void build(const torch::Tensor& k, const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& lam,
             const torch::Tensor& h_kk0) override {
    const int64_t H = k.size(2), K = k.size(3);
    C_ = std::min(chunk_size_, k.size(1));
    kc_ = to_chunks(k, C_);                                   // [B, H, N, C, K]
    auto kb = to_chunks(k * beta.unsqueeze(-1), C_);          // β k
    auto b = torch::cumsum(to_chunks(g, C_), -1);             // [B, H, N, C]
    auto b_last = b.narrow(-1, C_ - 1, 1);                    // [B, H, N, 1]
    auto chunk_decay = b_last.exp().unsqueeze(-1);            // [B, H, N, 1, 1]
    decay_ = b.exp().unsqueeze(-1);                           // e^{b_i} <= 1
    torch::Tensor k_decayed;                                  // β_j k_j e^{b_C − b_j}
    if (decay_factorisable(b)) {
      auto k_grown = kb * decay_.reciprocal();                // e^{−b_j} <= e^{span}
      k_grown_t_ = k_grown.transpose(-1, -2);
      gamma_ = kb_t_ = torch::Tensor();
      k_decayed = k_grown * chunk_decay;
    } else {
      auto diff = (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0.0);
      gamma_ = diff.exp().tril();                             // Γ_ij = e^{b_i − b_j}, i >= j
      kb_t_ = kb.transpose(-1, -2);
      k_grown_t_ = torch::Tensor();
      k_decayed = kb * (b_last - b).clamp_max(0.0).exp().unsqueeze(-1);
    }
    auto kk = chunk_matmul(k_decayed.transpose(-1, -2), kc_);  // [B, H, N, K, K]
    auto [starts, S] = chunk_state_scan(chunk_decay, kk, h_kk0);
    starts_ = starts;  // [B, H, N, K, K]
    // Factorised: one matmul (P ⊙ e^{b}) [(β K ⊙ e^{−b})ᵀ | S_n] gives the scores and the inter-chunk part together.
    if (k_grown_t_.defined()) {
      right_ = torch::cat({k_grown_t_, starts_}, -1);  // [B, H, N, K, C + K]
      k_grown_t_ = starts_ = torch::Tensor();
    } else {
      right_ = torch::Tensor();
    }
    final_kk_ = S;
    lam_ = lam.view({1, H, 1, 1, K});
  }

  torch::Tensor to_layout(const torch::Tensor& x) const override { return to_chunks(x, C_); }
  torch::Tensor from_layout(const torch::Tensor& x, int64_t T) const override { return from_chunks(x, T); }

  torch::Tensor apply(const torch::Tensor& p) const override {
    auto pd = p * decay_;
    torch::Tensor scores, inter;
    if (right_.defined()) {  // factorised
      auto both = chunk_matmul(pd, right_);
      scores = tril_fresh(both.narrow(-1, 0, C_));
      inter = both.narrow(-1, C_, both.size(-1) - C_);
    } else {
      scores = chunk_matmul(p, kb_t_);
      scores = recording_grad() ? scores * gamma_ : scores.mul_(gamma_);
      inter = chunk_matmul(pd, starts_);
    }
    auto out = chunk_matmul(scores, kc_);
    if (recording_grad()) return out + inter + lam_ * p;
    return out.add_(inter).add_(lam_ * p);
  }

  torch::Tensor take_final_kk() override { return std::move(final_kk_); }

  std::pair<torch::Tensor, torch::Tensor> readout(const torch::Tensor& x, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& g,
                                                  const torch::Tensor& beta, const torch::Tensor& h_kv0) override {
    auto r = simple_gla_chunk(x, k * beta.unsqueeze(-1), v, g, 1.0, h_kv0, chunk_size_);
    return {r.o, r.final_state};
  }

  // do_t G_tᵀ = Σ_{s<=t} e^{c_t − c_s} (do_t · v_s) β_s k_s + e^{c_t} do_t G_0ᵀ: simple GLA with query do, key v,
  // value β k and initial state G_0ᵀ.
  torch::Tensor readout_grad(const torch::Tensor& d_o, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& h_kv0) override {
    return simple_gla_chunk(d_o, v, k * beta.unsqueeze(-1), g, 1.0, h_kv0.transpose(-1, -2), chunk_size_).o;
  }

  std::pair<torch::Tensor, torch::Tensor> scan(const torch::Tensor& x, const torch::Tensor& k,
                                               const torch::Tensor& v, const torch::Tensor& g,
                                               const torch::Tensor& beta, const torch::Tensor& h0) override {
    auto r = simple_gla_chunk(x, k * beta.unsqueeze(-1), torch::cat({k, v}, -1), g, 1.0, h0, chunk_size_);
    return {r.o, r.final_state};
  }

 private:
  int64_t chunk_size_, C_ = 1;
  torch::Tensor kc_, decay_, k_grown_t_, kb_t_, gamma_, starts_, right_, final_kk_, lam_;
};

}  // namespace mesa_net_detail

MesaNetResult mesa_net_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                             const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                             int64_t chunk_size, MesaNetGradient gradient, double cg_eps) {
  check_mesa_net_inputs(q, k, v, g, beta, lambda, h_kk0, h_kv0, cg_steps);
  if (chunk_size < 1) throw Error("mesa_net: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  return mesa_net_run(std::make_shared<mesa_net_detail::MesaNetChunkForm>(chunk_size), q, k, v, g, beta, lambda,
                      h_kk0, h_kv0, cg_steps, gradient, cg_eps);
}

}  // namespace mnemo
