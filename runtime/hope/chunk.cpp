// Chunk-wise Hope kernels (runtime/hope/hope.h). Every read inside a chunk uses the chunk's start states, so a
// chunk's outputs, keys, values and gates are batched products; only the chunk-to-chunk pass is sequential
// (arXiv 2512.24695 §8.2).
#include <algorithm>
#include <vector>

#include "runtime/delta_rule/delta_rule.h"
#include "runtime/hope/hope.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

int64_t hope_detail::piece_length(int64_t pos, int64_t chunk_size, int64_t remaining) {
  return std::min(chunk_size - pos % chunk_size, remaining);
}

std::vector<int64_t> hope_detail::piece_lengths(int64_t T, int64_t offset, int64_t chunk_size) {
  std::vector<int64_t> lengths;
  for (int64_t t = 0; t < T;) {
    lengths.push_back(piece_length(offset + t, chunk_size, T - t));
    t += lengths.back();
  }
  return lengths;
}

std::vector<torch::Tensor> hope_detail::split_pieces(const torch::Tensor& x, const std::vector<int64_t>& lengths) {
  if (lengths.empty()) return {};
  return x.split_with_sizes(lengths, 1);
}

hope_detail::SmtPieces hope_detail::smt_pieces(const torch::Tensor& x_key, const torch::Tensor& x_value,
                                               const torch::Tensor& q, torch::ScalarType dt, int64_t offset,
                                               int64_t chunk_size) {
  SmtPieces p;
  p.lengths = piece_lengths(q.size(1), offset, chunk_size);
  p.a = split_pieces(x_key.to(dt), p.lengths);
  p.b = split_pieces(x_value.to(dt), p.lengths);
  p.q = split_pieces(q.to(dt), p.lengths);
  return p;
}

SmtResult smt_chunk(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                    const torch::Tensor& init, const SmtGates& gates, const torch::Tensor& chunk_start,
                    const torch::Tensor& running, int64_t chunk_size, int64_t offset) {
  check_smt_inputs(x_key, x_value, q, init, gates, chunk_start, running, chunk_size, offset);
  const auto dt = recurrence_dtype({x_key, x_value, q, init, chunk_start});
  const int64_t B = q.size(0), H = q.size(2), d = q.size(3);
  // The five memories side by side in the value dimension, one state [d, 5·d] per head: the layout of their joint
  // delta-rule step (below), kept through the loop; the reads view it as [B, 5, H, d, d].
  const auto side_by_side = [&](const torch::Tensor& s) {
    return s.permute({0, 2, 3, 1, 4}).reshape({B, H, d, kSmtMemories * d});
  };
  const auto per_memory = [&](const torch::Tensor& s) {
    return s.view({B, H, d, kSmtMemories, d}).permute({0, 3, 1, 2, 4});
  };
  auto [S_chunk5, S5] = hope_detail::smt_start_states(init, chunk_start, running, B, dt);
  auto S_chunk = side_by_side(S_chunk5), S = side_by_side(S5);
  // The read inputs of the whole call stacked once and cut into pieces along T (dim 3): one split, whose backward is
  // one concatenation.
  const auto lengths = hope_detail::piece_lengths(q.size(1), offset, chunk_size);
  const auto in = hope_detail::smt_read_inputs(x_key.to(dt), x_value.to(dt), q.to(dt)).split_with_sizes(lengths, 3);
  const auto gate_weights = hope_detail::smt_gate_weights(gates, dt);
  std::vector<torch::Tensor> outs;
  for (size_t i = 0, t = 0; i < lengths.size(); ++i) {
    const int64_t pos = offset + int64_t(t), n = lengths[i];
    const auto r = hope_detail::smt_reads(in[i], per_memory(S_chunk), gate_weights);
    outs.push_back(r.o);
    // The DGD step of all five memories as one gated delta rule: e^{g} = α, β = η / α, value
    // α (v̂_□ − M_□^c(k)) = α (v − k)(I + S_□^c), from S (the memories after the previous token). The five share the
    // keys, β and g, and a delta rule acts on each value column alone, so one state [d, 5·d] per head takes the step
    // of all five, the chunk's WY transform computed once; (v − k) S^c is one product with the side-by-side state.
    const auto residual = r.v - r.k;  // [B, H, n, d]
    const auto value = r.alpha.unsqueeze(-1) *
                       (residual.repeat({1, 1, 1, kSmtMemories}) + torch::matmul(residual, S_chunk));  // [B, H, n, 5·d]
    S = delta_rule_chunk_step(S, r.k, value, r.eta / r.alpha, r.log_alpha);
    if ((pos + n) % chunk_size == 0) S_chunk = S;
    t += size_t(n);
  }
  auto o = outs.empty() ? torch::zeros_like(q, q.options().dtype(dt)) : torch::cat(outs, 1);
  return {o.to(q.scalar_type()), per_memory(S_chunk), per_memory(S)};
}

CmsLevelResult cms_level_chunk(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                               const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                               int64_t chunk_size, int64_t offset) {
  check_cms_level_inputs(x, v, eta, w1_0, w2_0, state, chunk_size, offset);
  if (chunk_size == 0) return cms_level_recurrent(x, v, eta, w1_0, w2_0, state, 0, offset);  // one batched MLP
  const auto dt = recurrence_dtype({x, v, w1_0, state.w1});
  auto s = hope_detail::cms_start_state(w1_0, w2_0, state, x.size(0), dt);
  const auto lengths = hope_detail::piece_lengths(x.size(1), offset, chunk_size);
  const auto xd = x.to(dt);
  // What does not depend on the weights is computed for the whole call and cut into pieces: the inputs, the targets,
  // the steps η_t / C, and the second layer's input row scaled by its normalised step, x_t η_t / (C (1 + ‖x_t‖²)).
  const auto step = (eta.to(dt) / static_cast<double>(chunk_size)).unsqueeze(-1);  // [B, T, 1]
  const auto x_pieces = hope_detail::split_pieces(xd, lengths);
  const auto v_pieces = hope_detail::split_pieces(v.to(dt), lengths);
  const auto step_pieces = hope_detail::split_pieces(step, lengths);
  const auto x_step_pieces = hope_detail::split_pieces(xd * (step / (1 + xd.pow(2).sum(-1, true))), lengths);
  std::vector<torch::Tensor> ys;
  for (size_t i = 0, t = 0; i < lengths.size(); ++i) {
    const int64_t pos = offset + int64_t(t), n = lengths[i];
    const auto& X = x_pieces[i];  // [B, n, d]
    const auto Z = torch::bmm(X, s.w2);  // [B, n, h]
    const auto sig = torch::sigmoid(Z);
    const auto A = Z * sig;  // SiLU(Z)
    const auto Y = X + torch::bmm(A, s.w1);
    ys.push_back(Y);
    const auto e = Y - v_pieces[i];
    // Σ_t η_t / C · e_t-weighted gradients, each normalised by its layer's 1 + ‖input‖² (the rows scaled, not e).
    const auto A_step = A * (step_pieces[i] / (1 + A.pow(2).sum(-1, true)));
    const auto silu_grad = sig * (1 + Z - A);  // σ(z)(1 + z(1 − σ(z)))
    const auto g1 = torch::bmm(A_step.transpose(1, 2), e);
    const auto g2 = torch::bmm(x_step_pieces[i].transpose(1, 2), torch::bmm(e, s.w1.transpose(1, 2)) * silu_grad);
    // Every piece after the first starts a chunk, after the step that zeroed the pending sums.
    const bool fresh = i > 0;
    s.p1 = fresh ? g1 : s.p1 + g1;
    s.p2 = fresh ? g2 : s.p2 + g2;
    if ((pos + n) % chunk_size == 0) hope_detail::cms_apply_chunk_step(s);
    t += size_t(n);
  }
  auto y = ys.empty() ? torch::zeros_like(x.to(dt)) : torch::cat(ys, 1);
  return {y.to(x.scalar_type()), s};
}

}  // namespace mnemo
