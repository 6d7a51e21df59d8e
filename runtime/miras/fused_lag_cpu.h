// The CPU form of Memora's lag-token node (fused_lag.h): per (batch, head), the anchor pass of the single token, the
// two row-wise softmax updates and the read-out as loops over the weights' rows, one pass each way. The tensor form
// makes ~150 calls for one token, each a pass over a weight-sized array or a dispatch for a vector of d_h; this one
// makes one pass. Used where fused_cpu_eligible holds (CPU, one dtype fp32/fp64, fused kernels on); the tensor form
// stays for other devices and as the reference (tests/test_miras.cpp compares them).
#pragma once
#include <torch/torch.h>

#include "runtime/miras/miras.h"

namespace mnemo::miras_lag {

// The node's inputs in apply() order (fused_lag.cpp); DELTA is an empty placeholder unless the bias is Huber.
enum In { Q, K, V, LA, ETA, DELTA, GAM, BET, W0, W1, kInputs };

struct CpuForward {
  torch::Tensor out, w0, w1;  // [B, H, 1, d], the new weights
  torch::Tensor lg0, lg1;     // log max(W, floor) of the old weights (kept for the backward)
};
CpuForward forward_cpu(const torch::autograd::variable_list& in, const MirasOptions& o);

// Gradients of the inputs (In order; DELTA undefined unless Huber) from those of out, w0, w1 (undefined: zero).
torch::autograd::variable_list backward_cpu(const torch::autograd::variable_list& in, const CpuForward& f,
                                            const torch::Tensor& gout, const torch::Tensor& gw0,
                                            const torch::Tensor& gw1, const MirasOptions& o);

}  // namespace mnemo::miras_lag
