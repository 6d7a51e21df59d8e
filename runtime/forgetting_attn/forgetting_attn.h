// Forgetting attention kernels (docs/models.md#forgetting-transformer; Lin et al., "Forgetting Transformer", arXiv
// 2503.02130 §2; fixture op `forgetting_attn`): softmax attention whose logits carry the sum of the log forget gates
// between key and query,
//   o_i = Σ_{j<=i} softmax_j( scale q_i·k_j + c_i − c_j ) v_j,   c_t = Σ_{s<=t} log f_s,  log f_s <= 0
// Layout [B, T, H, D] (q, k, v), [B, T, H] (log f and its cumulative sum c). Logits and softmax in fp32 (fp64 stays
// fp64), row-max subtraction; the output in v's dtype. Both forms are plain autograd ops.
#pragma once
#include <torch/torch.h>

namespace mnemo {

// Parallel form, blocked over queries (memory O(q_block · Tk) per head without autograd). The Tq queries sit at the
// last Tq of the Tk key positions (Tq <= Tk: a decode step or a prefill after a cache); c_q [B, Tq, H] and c_k
// [B, Tk, H] are the cumulative log forget gates at the queries' and the keys' positions.
torch::Tensor forgetting_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& c_q, const torch::Tensor& c_k, double scale,
                                   int64_t q_block);

// Token-by-token reference over one sequence: for each t, the softmax over keys 0..t (tests and fixtures).
torch::Tensor forgetting_attention_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& log_f, double scale);

// Shape checks; throw mnemo::Error naming the tensor.
void check_forgetting_attention_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& c_q, const torch::Tensor& c_k);

}  // namespace mnemo
