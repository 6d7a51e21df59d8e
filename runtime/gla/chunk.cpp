// Chunk-wise GLA with secondary (sub-chunk) chunking for the intra-chunk matrix (spec §4.3, §12).
#include <limits>

#include "runtime/gla/gla.h"

namespace mnemo {

namespace {

int64_t largest_divisor_at_most(int64_t n, int64_t cap) {
  for (int64_t d = std::max<int64_t>(1, std::min(n, cap)); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// Intra-chunk scores A [.., C, C] (zero above the diagonal) from Q, K, B [.., C, K].
torch::Tensor intra_chunk_scores(const torch::Tensor& Q, const torch::Tensor& K,
                                 const torch::Tensor& B, int64_t c) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const int64_t C = Q.size(-2), Kd = Q.size(-1), S = C / c;
  auto lead = Q.sizes().vec();
  lead.resize(lead.size() - 2);
  auto blocks = [&](const torch::Tensor& x) {  // [.., C, K] -> [.., S, c, K]
    auto shape = lead;
    shape.insert(shape.end(), {S, c, Kd});
    return x.reshape(shape);
  };
  auto Qs = blocks(Q), Ks = blocks(K), Bs = blocks(B);
  const auto dev = Q.device();

  // Diagonal blocks: A_ij = Σ_k Q_ik K_jk exp(B_ik − B_jk), i >= j inside the block.
  auto diff = (Bs.unsqueeze(-2) - Bs.unsqueeze(-3)).clamp_max(0.0);  // [.., S, c, c, K]
  diff = diff.masked_fill(causal_mask(c, dev).logical_not().unsqueeze(-1), neg_inf);
  auto A_diag = (Qs.unsqueeze(-2) * Ks.unsqueeze(-3) * diff.exp()).sum(-1);  // [.., S, c, c]

  // Off-diagonal blocks J < I against r_I = B at the first row of block I.
  auto r = Bs.select(-2, 0);                                                // [.., S, K]
  auto q_n = Qs * (Bs - r.unsqueeze(-2)).clamp_max(0.0).exp();              // [.., S(I), c, K]
  auto e = (r.unsqueeze(-2).unsqueeze(-2) - Bs.unsqueeze(-4)).clamp_max(0.0);  // [.., I, J, c, K]
  auto earlier = causal_mask(S, dev, /*strict=*/true).unsqueeze(-1).unsqueeze(-1);  // [I, J, 1, 1]
  auto k_n = Ks.unsqueeze(-4) * e.masked_fill(earlier.logical_not(), neg_inf).exp();
  auto A_off = torch::matmul(q_n.unsqueeze(-3), k_n.transpose(-1, -2));     // [.., I, J, c, c]

  auto eye = torch::eye(S, Q.options()).unsqueeze(-1).unsqueeze(-1);        // [I, J, 1, 1]
  auto A_blocks = A_off + A_diag.unsqueeze(-3) * eye;                        // [.., I, J, c, c]
  const int64_t nd = A_blocks.dim();
  auto A = A_blocks.transpose(nd - 3, nd - 2);                               // [.., I, c, J, c]
  auto shape = lead;
  shape.insert(shape.end(), {C, C});
  return A.reshape(shape);
}

}  // namespace

RecurrentResult gla_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& gk, double scale, const torch::Tensor& initial_state,
                          int64_t chunk_size, int64_t sub_chunk) {
  check_gla_inputs("gla_chunk", q, k, v, gk, initial_state);
  check_chunking("gla_chunk", q.size(1), chunk_size);
  if (sub_chunk < 1) throw Error("gla_chunk: sub_chunk must be >= 1, got " + std::to_string(sub_chunk));
  const auto dt = recurrence_dtype(q);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t C = std::min(chunk_size, T);
  auto Q = to_chunks(q.to(dt) * scale, C), Kc = to_chunks(k.to(dt), C);  // [B, H, N, C, K]
  auto Vc = to_chunks(v.to(dt), C);                                        // [B, H, N, C, V]
  auto Bcum = torch::cumsum(to_chunks(gk.to(dt), C), -2);                  // [B, H, N, C, K]
  const int64_t N = Bcum.size(2);
  auto B_last = Bcum.narrow(-2, C - 1, 1);                                 // [B, H, N, 1, K]

  auto A = intra_chunk_scores(Q, Kc, Bcum, largest_divisor_at_most(C, sub_chunk));
  auto intra = torch::matmul(A, Vc);
  auto q_decayed = Q * Bcum.exp();
  auto k_decayed = Kc * (B_last - Bcum).clamp_max(0.0).exp();
  auto kv = torch::matmul(k_decayed.transpose(-1, -2), Vc);  // [B, H, N, K, V]
  auto chunk_decay = B_last.exp().transpose(-1, -2);         // [B, H, N, K, 1]

  auto S = initial_state.defined() ? initial_state.to(dt) : torch::zeros({B, H, K, V}, Q.options());
  std::vector<torch::Tensor> starts;
  starts.reserve(N);
  for (int64_t n = 0; n < N; ++n) {
    starts.push_back(S);
    S = chunk_decay.select(2, n) * S + kv.select(2, n);
  }
  auto O = torch::matmul(q_decayed, torch::stack(starts, 2)) + intra;
  return {from_chunks(O, T).to(q.scalar_type()), S};
}

}  // namespace mnemo
