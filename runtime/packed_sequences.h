// Packed sequences: N sequences of varying length laid back to back along one time axis, each read from the
// initial state (fla's `cu_seqlens` convention; docs/models.md#packed-sequences). Training with
// reset_state_at_bos hands the model its windows as they are plus where each document starts; a model whose every
// mixer has a packed form (the fused chunk kernels take cu_seqlens) runs them as one row of B·T tokens without
// padding, any other model runs them as right-padded rows grouped by length (padded_buckets).
//
// padded_rows / unpad_rows move a [total, C] tensor of one PaddedBucket to its rows [rows, length, C] and back.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace mnemo {

// Right-padded rows for the sequences of a PackedSequences, grouped so that each group's rows are padded to its
// longest sequence and no sequence in it is shorter than half of that: the padded tokens are fewer than the real
// ones, whatever the mix of lengths (padding every sequence to the longest could multiply the work by the number of
// sequences). Longest sequences first.
struct PaddedBucket {
  int64_t rows = 0, length = 0;
  torch::Tensor gather;   // int64 [rows · length]: the packed position each padded slot reads, `total` for padding
  torch::Tensor scatter;  // int64 [tokens of the bucket]: the padded slots that hold real tokens, in packed order
                          // of the bucket's sequences
  torch::Tensor packed;   // int64 [tokens of the bucket]: the packed positions of those tokens (same order)
};

struct PackedSequences {
  std::vector<int64_t> bounds;  // cu_seqlens on the host: 0 = b_0 < b_1 < ... < b_N = total tokens
  torch::Tensor cu_seqlens;     // the same bounds, int32 [N + 1], on the tokens' device (the kernels' argument)
  torch::Tensor positions;      // int64 [total]: each token's index inside its own sequence, on that device
  std::vector<PaddedBucket> buckets;  // padded_buckets(*this): for the forms that run the sequences as padded rows
  torch::Tensor unbucket;             // unbucket_permutation(buckets, total)

  int64_t count() const { return int64_t(bounds.size()) - 1; }
  int64_t total() const { return bounds.back(); }
  int64_t length(int64_t i) const { return bounds[size_t(i + 1)] - bounds[size_t(i)]; }
  int64_t max_length() const;

  // From bounds as above (an error names the first bound out of order).
  static PackedSequences from_bounds(std::vector<int64_t> bounds, const torch::Device& device);
  // From `starts` (bool [B, T], true where a sequence begins; position 0 of every row begins one): the B rows read
  // one after the other, so a sequence never crosses from one row into the next.
  static PackedSequences from_starts(const torch::Tensor& starts, const torch::Device& device);
};

std::vector<PaddedBucket> padded_buckets(const PackedSequences& seqs, const torch::Device& device);

// The bucket's rows of `packed` [total, C]: [rows, length, C], zeros in the padding.
torch::Tensor padded_rows(const torch::Tensor& packed, const PaddedBucket& bucket);
// The real tokens of a bucket's rows [rows, length, C] -> [tokens of the bucket, C], in the bucket's packed order.
torch::Tensor unpad_rows(const torch::Tensor& rows, const PaddedBucket& bucket);
// Per-bucket results of unpad_rows, in bucket order, put back in packed order: [total, C].
torch::Tensor unbucket_rows(const std::vector<torch::Tensor>& parts, const PackedSequences& seqs);

// The permutation that puts the buckets' tokens (concatenated in bucket order) back in packed order: packed[i] =
// cat(bucket tokens)[inverse[i]].
torch::Tensor unbucket_permutation(const std::vector<PaddedBucket>& buckets, int64_t total);

// Test hook: while one is alive on this thread, mixers take their packed forms on CPU tensors too (the fused chunk
// kernels' block code over the host grid, as CI checks the kernels), so a CPU test reaches the route a GPU takes.
// Without it a CPU model runs packed sequences as padded buckets: the tensor chunk forms are faster there.
struct PackedHostFormsScope {
  PackedHostFormsScope();
  ~PackedHostFormsScope();
  PackedHostFormsScope(const PackedHostFormsScope&) = delete;
  PackedHostFormsScope& operator=(const PackedHostFormsScope&) = delete;
};
// True on CUDA tensors in a build with the kernels (`kernels_available`), and on any tensor under the scope above.
bool packed_forms_enabled(const torch::Tensor& like, bool kernels_available);

}  // namespace mnemo
