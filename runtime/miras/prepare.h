// Miras kernel internals (see miras.h): the prepared inputs and the pieces that the token-by-token form (naive.cpp)
// and the chunk form (chunk.cpp) share: preparation (prepare.cpp), per-matrix scales, the inner-gradient terms, and
// the token steps of naive.cpp that the chunk form runs for the rest of a chunk and for Memora's lag token.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "runtime/miras/miras.h"

namespace mnemo {
namespace miras_detail {

// Per-token inputs of a run of tokens: q, k, v [B, H, n, d]; la, eta [B, H, n, G]; delta [B, H, n] (or undefined).
struct Seq {
  torch::Tensor q, k, v, la, eta, delta;
  int64_t len() const { return q.size(2); }
};

// Consecutive pieces of `sizes` tokens. One split (not a narrow per piece): a narrow's backward allocates a
// zero gradient of the whole sequence, which made the chunk loop's backward quadratic in T.
std::vector<Seq> split_seq(const Seq& x, const std::vector<int64_t>& sizes);

struct Prepared {
  Seq x;                                  // [B, H, T, ·]
  MemoryNorm norm;                        // γ, β [1, H, 1, d]
  DeepMemorySpec spec;
  MirasState st;
  int64_t G = 1, d = 0;
};

// Checks the options and shapes (throws Error), casts to the compute dtype, [B, T, H, ·] -> [B, H, T, ·].
Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& delta, const torch::Tensor& gamma,
                 const torch::Tensor& beta, const MirasState& st, const MirasOptions& opt);

// Per-matrix read/gradient scale: 1 / ||A^0||_q^{q-2} ("lq"), else undefined (1).
std::vector<torch::Tensor> scales(const MemoryWeights& anchor, const MirasOptions& o);
MemoryWeights scaled(const MemoryWeights& w, const std::vector<torch::Tensor>& sc);

// Gate broadcast onto a matrix: l = 0 (W_2 [hid, d]) on the input axis, l = 1 (W_1 [d, hid]) on the output axis.
torch::Tensor gate_on(const torch::Tensor& g /*[B, H, G]*/, size_t l);

// Rank-1 terms of the tokens z (keys) at weights w.
RankOneTerms grad_terms(const Prepared& p, const MemoryWeights& w, const torch::Tensor& K, const torch::Tensor& V,
                        const torch::Tensor& delta, const MirasOptions& o);

MirasResult finish(const Prepared& p, std::vector<torch::Tensor> outs, MirasState st, const torch::Tensor& v);

// Token steps (naive.cpp).
// Memora's lag-token update of the single token x from the current weights (in place on st); `fused`: as one
// autograd node (fused_lag.h), else op by op (the reference the node is tested against).
torch::Tensor lag_step(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o, bool fused = false);
// The tokens of x one by one.
std::vector<torch::Tensor> recurrent_impl(const Prepared& p, const Seq& x, MirasState& st, const MirasOptions& o);

}  // namespace miras_detail
}  // namespace mnemo
