// Chunked MesaNet (docs/models.md#mesanet). With the scalar decay, both states are scalar-decay linear attention
// memories: for any "query" p_t,
//   p_t H_t = Σ_{s<=t} e^{c_t − c_s} (p_t · k_s) β_s k_s + e^{c_t} p_t H_0,   c_t = Σ_{r<=t} g_r
// which is simple GLA (runtime/retnet/retnet.h: S_t = e^{g_t} S_{t-1} + k̃_tᵀ ṽ_t, o_t = p_t S_t) with key k̃ = β k,
// value ṽ = k and initial state H_0; H_t is symmetric, so p_t H_t = (H_t p_tᵀ)ᵀ. Every CG step is one such chunked
// call over the whole sequence (intra-chunk scores plus the chunk-boundary states), and o_t = x_t G_t is one more
// with value ṽ = v and initial state G_0. The final states are those calls' final states.
#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/mesa_net/mesa_net.h"
#include "runtime/retnet/retnet.h"

namespace mnemo {

MesaNetResult mesa_net_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& lambda,
                             const torch::Tensor& h_kk0, const torch::Tensor& h_kv0, int64_t cg_steps,
                             int64_t chunk_size) {
  check_mesa_net_inputs(q, k, v, g, beta, lambda, h_kk0, h_kv0, cg_steps);
  if (chunk_size < 1) throw Error("mesa_net: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, g, beta, lambda, h_kk0, h_kv0});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const auto opts = q.options().dtype(dt);
  auto Hk0 = h_kk0.defined() ? h_kk0.to(dt) : torch::zeros({B, H, K, K}, opts);
  auto Gv0 = h_kv0.defined() ? h_kv0.to(dt) : torch::zeros({B, H, K, V}, opts);
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), Hk0, Gv0};

  auto kc = k.to(dt), gc = g.to(dt);
  auto kb = kc * beta.to(dt).unsqueeze(-1);  // key β_s k_s
  auto lam = lambda.to(dt);                  // [H, K], broadcast over [B, T]
  torch::Tensor final_kk;
  auto apply = [&](const torch::Tensor& p) {  // (H_t + Diag(λ)) p_t for every t
    auto r = simple_gla_chunk(p, kb, kc, gc, 1.0, Hk0, chunk_size);
    final_kk = r.final_state;  // H_T: the same in every step
    return r.o + lam * p;
  };
  auto x = mesa_net_conjugate_gradient(apply, q.to(dt), cg_steps);
  auto out = simple_gla_chunk(x, kb, v.to(dt), gc, 1.0, Gv0, chunk_size);  // x_t G_t, final G_T
  return {out.o.to(v.scalar_type()), final_kk, out.final_state};
}

}  // namespace mnemo
