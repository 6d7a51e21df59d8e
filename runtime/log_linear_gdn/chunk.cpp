// Chunked log-linear Gated DeltaNet / log-linear attention (docs/models.md#log-linear-gated-deltanet; arXiv
// 2506.04761 §3.2 and §4, the chunkwise algorithm). With chunks of C = 2^c tokens aligned to absolute positions
// that are multiples of C, a query and a key in the same chunk have level bit_length(i XOR j) <= c from their
// offsets i, j in the chunk alone, and a key in an earlier chunk has a level > c that depends on the chunk indices
// only: level c + m is chunk-level m of the chunk index. Per chunk of rows Q (scaled), K, V, with b_i the inclusive
// cumulative log decay in the chunk and Γ_ij = exp(b_i − b_j) (j <= i):
//   A = stril(diag(β) (K Kᵀ) ⊙ Γ),  T = (I + A)⁻¹,  P = tril((Q Kᵀ) ⊙ Γ)
//   U = T diag(β) V,  W = T diag(β e^b) K,  N = P T          (one triangular solve each; N_ij is q_i's read of
//   key j's write through the Householder-like transitions between them, Γ included)
//   intra-chunk:  O = (N ⊙ Λ) diag(β) V,  Λ_ij = λ_i^(min(bit_length(i XOR j), NL − 1))
//   each level state S^(ℓ) before the chunk:  O += diag(λ^(ℓ)) (Q ⊙ e^b − N diag(β e^b) K) S^(ℓ)
//                                             S^(ℓ) <- e^{b_C} S^(ℓ) − (K ⊙ e^{b_C − b})ᵀ W S^(ℓ)
//   the chunk's own state (K ⊙ e^{b_C − b})ᵀ U then joins level 0 and the Fenwick carry before the next chunk
//   merges it upwards.
// Scalar-decay mode (no β): A = 0, T = I, U = V, W = 0. Derivation: q_i S_i with S_i = Σ_{j<=i} (the transitions
// j+1..i) β_j k_jᵀ v_j, and the WY identity Σ_j Γ_ij q_i (Π (I − β k kᵀ)) k_jᵀ β_j = (P T)_ij (the gated
// DeltaNet chunk form, runtime/delta_rule/chunk.cpp, with its pseudo-values split back into per-key terms).
#include <algorithm>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"

namespace mnemo {

namespace log_linear_detail {

// Λ's level index for in-chunk offsets (i, j): min(bit_length(i XOR j), NL − 1) (0 on the diagonal).
static torch::Tensor in_chunk_levels(int64_t C, int64_t NL, const torch::Device& device) {
  auto idx = torch::zeros({C, C}, torch::kLong);
  auto a = idx.accessor<int64_t, 2>();
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < C; ++j) {
      int64_t x = i ^ j, bits = 0;
      for (; x > 0; x >>= 1) ++bits;
      a[i][j] = std::min(bits, NL - 1);
    }
  return idx.to(device);
}

// The per-chunk pieces of the chunked form (full chunks, inputs in the compute dtype, q scaled): [B, H, N, ...].
struct ChunkPieces {
  torch::Tensor O_intra;      // the in-chunk outputs (N ⊙ Λ) diag(β) V                       [.., C, V]
  torch::Tensor R;            // the read of a level state: Q ⊙ e^b − N diag(β e^b) K          [.., C, K]
  torch::Tensor W, U;         // T diag(β e^b) K and T diag(β) V (W undefined without β, U = V)  [.., C, K | V]
  torch::Tensor K_out;        // K ⊙ e^{b_C − b}: a level update reads W S, writes K_outᵀ (U − W S)
  torch::Tensor chunk_decay;  // e^{b_C} [.., 1, 1] (undefined without g)
  torch::Tensor lam;          // the level weights [.., C, NL]
};

static ChunkPieces chunk_pieces(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& lam,
                                int64_t C) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), V = v.size(3);
  const int64_t NL = lam.size(3), N = T / C;
  ChunkPieces p;
  auto Q = to_chunks(q, C), Kc = to_chunks(k, C), Vc = to_chunks(v, C);  // [B, H, N, C, D]
  p.lam = to_chunks(lam, C);                                             // [B, H, N, C, NL]
  torch::Tensor gamma, eb, Q_in = Q;
  p.K_out = Kc;
  if (g.defined()) {
    auto b = to_chunks(g, C).cumsum(-1);  // [B, H, N, C]
    eb = b.exp().unsqueeze(-1);
    auto b_last = b.narrow(-1, C - 1, 1);
    p.chunk_decay = b_last.exp().unsqueeze(-1);  // [B, H, N, 1, 1]
    // Differences are <= 0 in exact arithmetic (g <= 0); the clamp removes rounding (docs/models.md#numerical-stability).
    gamma = (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0.0).exp().tril();
    Q_in = Q * eb;
    p.K_out = Kc * (b_last - b).clamp_max(0.0).exp().unsqueeze(-1);
  }
  auto P = chunk_matmul(Q, Kc.transpose(-1, -2));
  P = gamma.defined() ? P * gamma : P.tril();
  torch::Tensor Nmat, values;
  if (beta.defined()) {
    auto beta_c = to_chunks(beta, C).unsqueeze(-1);  // [B, H, N, C, 1]
    auto Kb = Kc * beta_c;
    auto A = chunk_matmul(Kb, Kc.transpose(-1, -2));
    A = (gamma.defined() ? A * gamma : A).tril(-1);
    values = Vc * beta_c;
    auto rhs_k = eb.defined() ? Kb * eb : Kb;
    const int64_t K = q.size(3);
    // T [βV, βe^b K] and P T: unit-triangular solves (the zero diagonal of A is not read).
    auto solved = torch::linalg_solve_triangular(A, torch::cat({values, rhs_k}, -1), /*upper=*/false, /*left=*/true,
                                                 /*unitriangular=*/true);
    p.U = solved.narrow(-1, 0, V);
    p.W = solved.narrow(-1, V, K);
    Nmat = torch::linalg_solve_triangular(A, P, /*upper=*/false, /*left=*/false, /*unitriangular=*/true);
    p.R = Q_in - chunk_matmul(Nmat, rhs_k);
  } else {
    Nmat = P;
    values = p.U = Vc;
    p.R = Q_in;
  }
  auto idx = in_chunk_levels(C, NL, q.device()).expand({B, H, N, C, C});
  auto Lambda = torch::gather(p.lam, -1, idx);       // [B, H, N, C, C]
  p.O_intra = chunk_matmul(Nmat * Lambda, values);   // [B, H, N, C, V]
  return p;
}

// Chunk by chunk, each occupied level state read and moved through the chunk's transition, the chunk's own state
// joining level 0 and the Fenwick carry after it (the CPU's route: 1 + popcount(chunk index) level steps a chunk).
static torch::Tensor loop_levels(const ChunkPieces& p, std::vector<torch::Tensor>& levels, int64_t p0, int64_t C) {
  const int64_t N = p.R.size(2), NL = p.lam.size(-1);
  const bool delta = p.W.defined();
  auto own = chunk_matmul(p.K_out.transpose(-1, -2), p.U);  // [B, H, N, K, V]
  const auto O_n = p.O_intra.unbind(2), own_n = own.unbind(2), lam_n = p.lam.unbind(2), K_out_n = p.K_out.unbind(2);
  const auto WR_n = delta ? torch::cat({p.W, p.R}, -2).unbind(2) : p.R.unbind(2);  // [W; R], or R without β
  const auto decay_n = p.chunk_decay.defined() ? p.chunk_decay.unbind(2) : std::vector<torch::Tensor>();
  std::vector<torch::Tensor> outs;
  outs.reserve(N);
  for (int64_t n = 0; n < N; ++n) {
    auto o = O_n[n];
    for (int64_t l = 0; l < NL; ++l) {
      auto& S = levels[l];
      if (!S.defined()) continue;
      auto prod = chunk_matmul(WR_n[n], S);  // [W; R] S, or R S without β
      auto RS = delta ? prod.narrow(-2, C, C) : prod;
      o = o + lam_n[n].select(-1, l).unsqueeze(-1) * RS;
      if (!decay_n.empty()) S = S * decay_n[n];
      if (delta) S = S - chunk_matmul(K_out_n[n].transpose(-1, -2), prod.narrow(-2, 0, C));
    }
    outs.push_back(o);
    levels[0] = levels[0].defined() ? levels[0] + own_n[n] : own_n[n];
    carry(levels, p0 + (n + 1) * C);
  }
  return torch::stack(outs, 2);  // [B, H, N, C, V]
}

// The sum of the level states that hold the chunks of the current block of `block` chunks (absolute chunk indices
// a − a mod block .. a − 1 before chunk a; block 0: every earlier chunk), before each chunk n0 .. n0 + N − 1 and
// before chunk n0 + N, from `first` (the sum before chunk n0). One chunk state pass (chunking.h) over the chunks
// padded to whole blocks, the blocks as sequences starting from zero: Gated DeltaNet's pass
//   S_{a+1} = e^{b_C} S_a + K_outᵀ (U − W S_a)   (scalar-decay mode: e^{b_C} S_a + K_outᵀ V),
// padded chunks inert (W = U = K_out = 0, decay 1).
struct BlockSums {
  torch::Tensor before_chunk;  // [B, H, N, K, V]
  torch::Tensor after_last;    // [B, H, K, V]
};

static BlockSums block_sums(const ChunkPieces& p, const torch::Tensor& increments, const torch::Tensor& first,
                            int64_t n0, int64_t block) {
  const int64_t B = p.R.size(0), H = p.R.size(1), N = p.R.size(2), K = first.size(-2), V = first.size(-1);
  const int64_t front = block > 0 ? n0 % block : 0;
  const int64_t padded = block > 0 ? (front + N + block - 1) / block * block : N;
  const int64_t back = padded - front - N, blocks = block > 0 ? padded / block : 1, length = padded / blocks;
  // [B, H, N, ...] -> [B, H·blocks, length, ...] with `front` and `back` inert chunks around the N.
  auto as_blocks = [&](const torch::Tensor& t, double fill) {
    auto padded_t = front + back > 0 ? torch::constant_pad_nd(t, {0, 0, 0, 0, front, back}, fill) : t;
    return padded_t.reshape({B, H * blocks, length, t.size(3), t.size(4)});
  };
  auto decay = p.chunk_decay.defined() ? p.chunk_decay : torch::ones({B, H, N, 1, 1}, p.R.options());
  auto initial = torch::cat({first.unsqueeze(2), torch::zeros({B, H, blocks - 1, K, V}, first.options())}, 2)
                     .reshape({B, H * blocks, K, V});
  torch::Tensor starts, final_state;
  if (p.W.defined()) {
    auto pass = chunk_delta_state_scan(as_blocks(p.W, 0.0), as_blocks(p.U, 0.0), as_blocks(p.K_out, 0.0),
                                       as_blocks(decay, 1.0), {}, initial);
    starts = pass.starts, final_state = pass.final_state;
  } else {
    auto pass = chunk_state_scan(as_blocks(decay, 1.0), as_blocks(increments, 0.0), initial);
    starts = pass.starts, final_state = pass.final_state;
  }
  BlockSums sums;
  sums.before_chunk = starts.reshape({B, H, padded, K, V}).narrow(2, front, N);
  // Before chunk n0 + N: a fresh block (zero) when it starts one, else the last block's final state.
  sums.after_last = block > 0 && (n0 + N) % block == 0
                        ? torch::zeros({B, H, K, V}, first.options())
                        : final_state.reshape({B, H, blocks, K, V}).select(2, blocks - 1);
  return sums;
}

// All chunks at once (a GPU's route: a few chunk state passes, one kernel each, instead of N · (1 + popcount) steps
// of small ops). Before chunk a the levels c + 1 .. c + j hold exactly the chunks of a's block of 2^j chunks
// (c = log2 C; levels 0 .. c are empty between chunks), since a Fenwick carry moves a level out of that group only at
// the end of such a block. Every level takes the same transition, so the group sum P^j is one state pass restarted
// at every block, and with the top level NL − 1 (where the higher levels merge) holding the rest of the total P^top:
//   o += Σ_{j=1}^{J} (λ^(c+j) − λ^(c+j+1)) ⊙ R P^j + λ^(NL−1) ⊙ R P^top,   J = NL − 2 − c, λ^(c+J+1) = λ^(NL−1),
// and the level states after the chunks are the differences of successive group sums (docs/models.md#log-linear-gated-deltanet).
// Groups that sum to the total need no pass of their own: the total takes the lowest one's place and weight.
static torch::Tensor scan_levels(ChunkPieces p, std::vector<torch::Tensor>& levels, int64_t p0, int64_t C) {
  // Every pass reads W, U and K_out as [B·H·blocks, ...] sequences: contiguous once, each pass takes views of them
  // (unpadded, as when training from position 0 on whole blocks), so no pass copies them and autograd keeps one.
  if (p.W.defined()) p.W = p.W.contiguous();
  p.U = p.U.contiguous();
  p.K_out = p.K_out.contiguous();
  const int64_t B = p.R.size(0), H = p.R.size(1), K = p.R.size(4), V = p.U.size(4), NL = p.lam.size(-1);
  const int64_t top = NL - 1, n0 = p0 / C;
  int64_t c = 0;
  while ((int64_t{1} << c) < C) ++c;
  const int64_t J = std::max<int64_t>(0, top - c - 1), N = p.R.size(2);
  // A group whose block holds every chunk and the position after them (no restart), with no level above it holding
  // anything, sums to the total: from the first such group on, the total serves them all (in training from position
  // 0 at T 2048, C 64: groups 1–5 and the total, 6 passes, instead of 7 groups and the total).
  auto is_total = [&](int64_t j) {
    const int64_t block = int64_t{1} << j;
    if (n0 % block + N >= block) return false;
    for (int64_t l = c + j + 1; l <= top; ++l)
      if (levels[l].defined()) return false;
    return true;
  };
  int64_t groups = J;  // groups 1 .. groups have passes of their own
  while (groups >= 1 && is_total(groups)) --groups;
  auto increments = p.W.defined() ? torch::Tensor() : chunk_matmul(p.K_out.transpose(-1, -2), p.U);
  auto level_sum = [&](int64_t from, int64_t to) {  // Σ levels[from .. to] before chunk n0
    auto sum = torch::zeros({B, H, K, V}, p.R.options());
    for (int64_t l = from; l <= to; ++l)
      if (levels[l].defined()) sum = sum + levels[l];
    return sum;
  };
  auto weight = [&](int64_t level) { return p.lam.select(-1, level).unsqueeze(-1); };  // [B, H, N, C, 1]
  const int64_t rest = std::min(c + groups + 1, top);  // the level that holds the total minus the groups
  std::vector<torch::Tensor> after(groups + 1);  // group sums before chunk n0 + N; [groups] the total
  torch::Tensor o = p.O_intra;
  for (int64_t j = 1; j <= groups; ++j) {
    auto sums = block_sums(p, increments, level_sum(c + 1, c + j), n0, int64_t{1} << j);
    o = o + (weight(c + j) - weight(std::min(c + j + 1, rest))) * chunk_matmul(p.R, sums.before_chunk);
    after[j - 1] = sums.after_last;
  }
  auto total = block_sums(p, increments, level_sum(0, top), n0, 0);
  o = o + weight(rest) * chunk_matmul(p.R, total.before_chunk);
  after[groups] = total.after_last;
  for (auto& level : levels) level = torch::Tensor();
  for (int64_t j = 1; j <= groups; ++j) levels[c + j] = j == 1 ? after[0] : after[j - 1] - after[j - 2];
  levels[rest] = groups == 0 ? after[0] : after[groups] - after[groups - 1];
  return o;
}

// Full chunks only (T a multiple of C), the first at absolute position p0 (a multiple of C); levels below
// c + 1 of `levels` are empty (or NL == 1). Inputs in the compute dtype, q scaled.
static torch::Tensor chunk_body(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& beta, const torch::Tensor& g, const torch::Tensor& lam,
                                std::vector<torch::Tensor>& levels, int64_t p0, int64_t C) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), V = v.size(3), N = T / C;
  const auto pieces = chunk_pieces(q, k, v, beta, g, lam, C);
  auto o = state_pass_kernel_route(q) ? scan_levels(pieces, levels, p0, C) : loop_levels(pieces, levels, p0, C);
  return o.permute({0, 2, 3, 1, 4}).reshape({B, N * C, H, V});  // [B, H, N, C, V] -> [B, N·C, H, V]
}

}  // namespace log_linear_detail

LogLinearResult log_linear_gdn_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& beta, const torch::Tensor& g,
                                     const torch::Tensor& level_weights, const torch::Tensor& initial_state,
                                     int64_t start, double scale, int64_t chunk_size, bool output_final_state) {
  check_log_linear_inputs(q, k, v, beta, g, level_weights, initial_state, start);
  if (chunk_size < 1 || (chunk_size & (chunk_size - 1)) != 0)
    throw Error("log_linear_gdn: chunk_size must be a power of two (the chunks align with the Fenwick levels), got " +
                std::to_string(chunk_size));
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  const auto dt = recurrence_dtype({q, k, v, beta, g, level_weights, initial_state});
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  const int64_t NL = level_weights.size(3), C = chunk_size;
  const auto opts = q.options().dtype(dt);
  auto levels = log_linear_detail::unstack(initial_state.defined() ? initial_state.to(dt) : torch::Tensor(), NL);
  if (T == 0) return {torch::zeros({B, 0, H, V}, v.options()), log_linear_detail::stack(levels, opts, {B, H, K, V})};

  auto qs = q.to(dt) * scale, ks = k.to(dt), vs = v.to(dt), lam = level_weights.to(dt);
  auto bs = beta.defined() ? beta.to(dt) : torch::Tensor();
  auto gs = g.defined() ? g.to(dt) : torch::Tensor();
  // The recurrence runs up to the first chunk boundary (through the whole first chunk from a given state: its
  // lower levels move up within that chunk), the chunked form over full chunks, the recurrence over the rest.
  const int64_t to_boundary = (C - start % C) % C;
  const int64_t head = std::min(T, initial_state.defined() && to_boundary == 0 ? C : to_boundary);
  // Without a final state the rest after the full chunks needs no recurrence: padded with inert tokens (k = 0,
  // β = 0, g = 0: identity transitions, no writes) it is one more chunk whose padded rows are dropped.
  const int64_t body = output_final_state ? ((T - head) / C) * C : T - head, tail = T - head - body;
  auto piece = [](const torch::Tensor& t, int64_t from, int64_t len) {
    return t.defined() ? t.narrow(1, from, len) : torch::Tensor();
  };
  auto run_steps = [&](int64_t from, int64_t len) {
    auto gp = piece(gs, from, len);
    return log_linear_detail::steps(piece(qs, from, len), piece(ks, from, len), piece(vs, from, len),
                                    piece(bs, from, len), gp.defined() ? gp.exp() : gp, piece(lam, from, len),
                                    levels, start + from);
  };
  std::vector<torch::Tensor> outs;
  if (head > 0) outs.push_back(run_steps(0, head));
  if (body > 0) {
    auto pad = [&](const torch::Tensor& t) { return t.defined() ? pad_time(piece(t, head, body), C) : t; };
    auto o_body = log_linear_detail::chunk_body(pad(qs), pad(ks), pad(vs), pad(bs), pad(gs), pad(lam), levels,
                                                start + head, C);
    outs.push_back(body % C == 0 ? o_body : o_body.narrow(1, 0, body));
  }
  if (tail > 0) outs.push_back(run_steps(head + body, tail));
  auto o = outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
  if (!output_final_state) return {o.to(v.scalar_type()), torch::Tensor()};
  return {o.to(v.scalar_type()), log_linear_detail::stack(levels, opts, {B, H, K, V})};
}

}  // namespace mnemo
