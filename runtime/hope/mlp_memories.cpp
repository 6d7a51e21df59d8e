// Self-modifying Titans with MLP memories (runtime/hope/hope.h, smt_mlp_*): the token-by-token form, which steps the
// running weights once per token, and the chunk form, which takes a chunk's step as one weighted sum of the tokens'
// gradients at the chunk start. Both read every token of a chunk from its start weights (arXiv 2512.24695 Eq. 90).
#include <algorithm>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/hope/hope.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"

namespace mnemo {

namespace {

void check_smt_mlp_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                          const SmtMlpMemories& init, const SmtGates& gates, const SmtMlpMemories& chunk_start,
                          const SmtMlpMemories& running, int64_t chunk_size, int64_t offset) {
  const char* k = "self_modifying_titans (mlp memories)";
  if (!init.w1.defined() || !init.w2.defined() || init.w1.dim() != 4 || init.w2.dim() != 4)
    throw Error(std::string(k) + ": init w1 [5, H, h, d] and w2 [5, H, d, h] are required");
  check_smt_token_inputs(x_key, x_value, q, gates, chunk_size, offset);
  const int64_t H = x_key.size(2), d = x_key.size(3), h = init.w1.size(2);
  auto expect = [&](const char* name, const torch::Tensor& t, std::vector<int64_t> shape) {
    if (!t.sizes().equals(shape))
      throw Error(std::string(k) + ": " + name + " must be " + c10::str(c10::IntArrayRef(shape)) + ", got " +
                  c10::str(t.sizes()));
  };
  expect("init w1", init.w1, {kSmtMemories, H, h, d});
  expect("init w2", init.w2, {kSmtMemories, H, d, h});
  const bool given = chunk_start.w1.defined();
  if (given != chunk_start.w2.defined() || given != running.w1.defined() || given != running.w2.defined())
    throw Error(std::string(k) + ": chunk_start and running must both be given (w1 and w2) or both be absent");
  if (given) {
    const int64_t B = q.size(0);
    expect("chunk_start w1", chunk_start.w1, {B, kSmtMemories, H, h, d});
    expect("chunk_start w2", chunk_start.w2, {B, kSmtMemories, H, d, h});
    expect("running w1", running.w1, {B, kSmtMemories, H, h, d});
    expect("running w2", running.w2, {B, kSmtMemories, H, d, h});
  }
}

std::pair<SmtMlpMemories, SmtMlpMemories> mlp_start_memories(const SmtMlpMemories& init, const SmtMlpMemories& chunk_start,
                                                         const SmtMlpMemories& running, int64_t batch,
                                                         torch::ScalarType dt) {
  if (chunk_start.w1.defined())
    return {{chunk_start.w1.to(dt), chunk_start.w2.to(dt)}, {running.w1.to(dt), running.w2.to(dt)}};
  auto broadcast = [&](const torch::Tensor& w) {
    return w.to(dt).unsqueeze(0).expand({batch, w.size(0), w.size(1), w.size(2), w.size(3)});
  };
  const SmtMlpMemories m{broadcast(init.w1), broadcast(init.w2)};
  return {m, m};
}

// M_m(in) = in + SiLU(in W2_m) W1_m for in [B, H, n, d] -> [B, H, n, d].
torch::Tensor mlp_read(const SmtMlpMemories& W, int64_t m, const torch::Tensor& in) {
  return in + torch::matmul(torch::silu(torch::matmul(in, W.w2.select(1, m))), W.w1.select(1, m));
}

// The reads of a piece from the chunk-start weights W (smt_reads with MLP memories).
hope_detail::SmtReads mlp_reads(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                                const SmtMlpMemories& W, const hope_detail::SmtGateWeights& gates) {
  const auto a = x_key.transpose(1, 2), b = x_value.transpose(1, 2);  // [B, H, n, d]
  hope_detail::SmtReads r;
  r.k = l2norm(mlp_read(W, kSmtKey, a));
  r.v = l2norm(mlp_read(W, kSmtValue, b));
  const auto gate_reads = torch::stack({mlp_read(W, kSmtEta, a), mlp_read(W, kSmtAlpha, a)}, 1);  // [B, 2, H, n, d]
  hope_detail::smt_gate_values(r, (gate_reads * gates.w).sum(-1) + gates.b, gates.eta_max);
  r.o = mlp_read(W, kSmtMemory, q.transpose(1, 2)).transpose(1, 2);
  return r;
}

// The step of all five memories for the tokens of a piece, each token's gradient at W (the chunk start) weighted by
// `weight` [B, H, n]: Σ_t weight_t / (1 + ‖∇ℓ_t‖² / ‖e_t‖²) ∇_W ½‖M_□(k_t) − M_□(v_t)‖², as [B, 5, H, h, d] and
// [B, 5, H, d, h]. The normaliser is the normalised LMS step of the whole memory (for a matrix memory it is
// 1 + ‖k‖², hope.h): ‖∇ℓ‖² / ‖e‖² = ‖u‖² + ‖k‖² ‖δ‖² / ‖e‖² with u = SiLU(k W2), δ = (e W1ᵀ) ⊙ SiLU'(k W2).
SmtMlpMemories mlp_weighted_gradients(const hope_detail::SmtReads& r, const SmtMlpMemories& W, const torch::Tensor& weight) {
  const auto K = r.k.unsqueeze(1), V = r.v.unsqueeze(1);  // [B, 1, H, n, d]
  const auto Z = torch::matmul(K, W.w2);                                                   // [B, 5, H, n, h]
  const auto U = torch::silu(Z);
  const auto E = K + torch::matmul(U, W.w1) - (V + torch::matmul(torch::silu(torch::matmul(V, W.w2)), W.w1));
  const auto Delta = torch::matmul(E, W.w1.transpose(-1, -2)) * hope_detail::silu_grad(Z);  // [B, 5, H, n, h]
  const auto e2 = E.pow(2).sum(-1, true);
  const auto gain = U.pow(2).sum(-1, true) + K.pow(2).sum(-1, true) * Delta.pow(2).sum(-1, true) / (e2 + 1e-30);
  const auto c = weight.unsqueeze(1).unsqueeze(-1) / (1 + gain);                          // [B, 5, H, n, 1]
  // ∇W1 = uᵀ e, ∇W2 = kᵀ δ.
  return {torch::matmul(U.transpose(-1, -2), c * E), torch::matmul(K.transpose(-1, -2), c * Delta)};
}

}  // namespace

SmtMlpResult smt_mlp_recurrent(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                               const SmtMlpMemories& init, const SmtGates& gates, const SmtMlpMemories& chunk_start,
                               const SmtMlpMemories& running, int64_t chunk_size, int64_t offset) {
  check_smt_mlp_inputs(x_key, x_value, q, init, gates, chunk_start, running, chunk_size, offset);
  const auto dt = recurrence_dtype({x_key, x_value, q, init.w1, chunk_start.w1});
  auto [W_chunk, W] = mlp_start_memories(init, chunk_start, running, q.size(0), dt);
  const auto ad = x_key.to(dt), bd = x_value.to(dt), qd = q.to(dt);
  const auto gate_weights = hope_detail::smt_gate_weights(gates, dt);
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < q.size(1); ++t) {
    const auto r = mlp_reads(ad.narrow(1, t, 1), bd.narrow(1, t, 1), qd.narrow(1, t, 1), W_chunk, gate_weights);
    outs.push_back(r.o);
    // W_t = α_t W_{t−1} − η_t / (1 + ‖u_t‖²) ∇_W ℓ_t(W^c)
    const auto step = mlp_weighted_gradients(r, W_chunk, r.eta);
    const auto alpha = r.alpha.reshape({q.size(0), 1, q.size(2), 1, 1});  // [B, 1, H, 1, 1]
    W = {alpha * W.w1 - step.w1, alpha * W.w2 - step.w2};
    if ((offset + t + 1) % chunk_size == 0) W_chunk = W;
  }
  auto o = outs.empty() ? torch::zeros_like(qd) : torch::cat(outs, 1);
  return {o.to(q.scalar_type()), W_chunk, W};
}

SmtMlpResult smt_mlp_chunk(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                           const SmtMlpMemories& init, const SmtGates& gates, const SmtMlpMemories& chunk_start,
                           const SmtMlpMemories& running, int64_t chunk_size, int64_t offset) {
  check_smt_mlp_inputs(x_key, x_value, q, init, gates, chunk_start, running, chunk_size, offset);
  const auto dt = recurrence_dtype({x_key, x_value, q, init.w1, chunk_start.w1});
  const int64_t B = q.size(0), H = q.size(2);
  auto [W_chunk, W] = mlp_start_memories(init, chunk_start, running, B, dt);
  const auto pieces = hope_detail::smt_pieces(x_key, x_value, q, dt, offset, chunk_size);
  const auto gate_weights = hope_detail::smt_gate_weights(gates, dt);
  std::vector<torch::Tensor> outs;
  for (size_t i = 0, t = 0; i < pieces.lengths.size(); ++i) {
    const int64_t pos = offset + int64_t(t), n = pieces.lengths[i];
    const auto r = mlp_reads(pieces.a[i], pieces.b[i], pieces.q[i], W_chunk, gate_weights);
    outs.push_back(r.o);
    // Token t's step decays by the retention of every later token of the piece: weight η_t Π_{s>t} α_s, and the
    // weights from before the piece by Π α (log-space sums; α ∈ (0, 1)).
    const auto& log_alpha = r.log_alpha;                                            // [B, H, n]
    const auto total = log_alpha.sum(-1, true);                                     // [B, H, 1]
    const auto after = total - torch::cumsum(log_alpha, -1);                        // Σ_{s>t} log α_s
    const auto step = mlp_weighted_gradients(r, W_chunk, r.eta * after.exp());
    const auto decay = total.exp().view({B, 1, H, 1, 1});
    W = {decay * W.w1 - step.w1, decay * W.w2 - step.w2};
    if ((pos + n) % chunk_size == 0) W_chunk = W;
    t += size_t(n);
  }
  auto o = outs.empty() ? torch::zeros_like(q, q.options().dtype(dt)) : torch::cat(outs, 1);
  return {o.to(q.scalar_type()), W_chunk, W};
}

}  // namespace mnemo
