// Chunked Gated DeltaProduct (docs/models.md#gated-deltaproduct): the token recurrence of delta_product.h is the delta
// rule over T·n_h rows r = t·n_h + j with
//   decay row g'_r = g_t for j = 0, 0 otherwise      (the token's decay once, before its first step)
//   query row q'_r = q_t for j = n_h − 1, 0 otherwise (the token is read after its last step)
// so the chunked delta rule (WY/UT form, runtime/delta_rule/chunk.cpp) computes it exactly, and so do its fused chunk
// kernels (runtime/delta_rule/chunk_kernel.cuh); the zero query rows cost a factor n_h in the output products, not in
// the state updates.
#include "core/common.h"
#include "runtime/delta_product/delta_product.h"

namespace mnemo {

namespace {

// The delta-rule rows of the tokens' queries and decays: q'_r = q_t for j = n_h − 1 (zeros before), g'_r = g_t for
// j = 0 (zeros after); g' undefined without a gate.
std::pair<torch::Tensor, torch::Tensor> token_rows(const torch::Tensor& q, const torch::Tensor& g, int64_t n) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  auto q_rows = torch::cat({torch::zeros({B, T, n - 1, H, K}, q.options()), q.unsqueeze(2)}, 2).view({B, T * n, H, K});
  torch::Tensor g_rows;
  if (g.defined())
    g_rows = torch::cat({g.unsqueeze(2), torch::zeros({B, T, n - 1, H}, g.options())}, 2).view({B, T * n, H});
  return {q_rows, g_rows};
}

// The tokens' outputs: every n_h-th row's, starting at row n_h − 1.
torch::Tensor token_outputs(const torch::Tensor& o_rows, int64_t n) {
  const int64_t B = o_rows.size(0), R = o_rows.size(1), H = o_rows.size(2), V = o_rows.size(3);
  return o_rows.view({B, R / n, n, H, V}).select(2, n - 1);
}

}  // namespace

DeltaRuleResult gated_delta_product_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& beta, const torch::Tensor& g,
                                          const torch::Tensor& initial_state, double scale, int64_t num_householder,
                                          int64_t chunk_size) {
  check_delta_product_inputs(q, k, v, beta, g, initial_state, num_householder);
  const int64_t n = num_householder;
  if (n == 1) return delta_rule_chunk(q, k, v, beta, g, initial_state, scale, chunk_size);
  auto [q_rows, g_rows] = token_rows(q, g, n);
  auto r = delta_rule_chunk(q_rows, k, v, beta, g_rows, initial_state, scale, chunk_size);
  return {token_outputs(r.o, n), r.final_state};
}

DeltaRuleResult gated_delta_product_chunk_fused(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, const torch::Tensor& beta,
                                                const torch::Tensor& g, const torch::Tensor& initial_state,
                                                double scale, int64_t num_householder, int64_t chunk_size,
                                                const torch::Tensor& cu_seqlens) {
  const bool packed = cu_seqlens.defined();
  check_delta_product_inputs(q, k, v, beta, g, packed ? torch::Tensor() : initial_state, num_householder);
  const int64_t n = num_householder;
  // A document of L tokens is L·n_h rows, so its row bounds are the token bounds times n_h.
  const auto row_bounds = packed ? cu_seqlens * n : torch::Tensor();
  if (n == 1) return delta_rule_chunk_fused(q, k, v, beta, g, initial_state, scale, chunk_size, row_bounds);
  auto [q_rows, g_rows] = token_rows(q, g, n);
  auto r = delta_rule_chunk_fused(q_rows, k, v, beta, g_rows, initial_state, scale, chunk_size, row_bounds);
  return {token_outputs(r.o, n), r.final_state};
}

}  // namespace mnemo
