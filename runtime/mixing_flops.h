// The cost model of a token mixer: forward FLOPs per token of its token mixing, i.e. the work beyond the matmuls
// of its parameters (those are 2·N per token for the whole model, counted once in engine/training/flops.h). Each family
// names its formula on its registration (runtime/registry.h FamilyTraits); bench, the training runs' FLOP count
// and the report's FLOP axes all read it from there. With d = d_model, d_h = head dim:
//   attention            4·K·d        K = keys the token attends: t+1 causal, min(t+1, W) in a window of W,
//                                     (t mod S)+1 in segments of S (QKᵀ and AV, 2 FLOPs a multiply-add)
//   chunked recurrence   2·C·d + 4·d·d_h   chunk (or mini-batch) C: the intra-chunk scores and their product with
//                                     the values, plus the state read and update; decode: 4·d·d_h
//   deep memory          the above + 16·E·d·d_h   a memory MLP of width E·d_h read once and trained by one inner
//                                     gradient step (3× a forward) per token
#pragma once
#include <cstdint>
#include <functional>

#include "core/common.h"

namespace mnemo {

struct MixingFlopsQuery {
  const json& args;        // the layer's mixer arguments, defaults filled in (ModelConfig::layer_args)
  double d_model = 0;
  double head_dim = 0;     // d_model / heads: the args' num_heads when > 0, else the model's n_heads
  int64_t first_position = 0;  // the tokens counted are positions [first_position, first_position + positions)
  int64_t positions = 1;
  bool decode = false;     // one token at a time from the carried state (no chunk)
};

// Forward FLOPs per token, averaged over the query's positions.
using MixingFlops = std::function<double(const MixingFlopsQuery&)>;

// The mixer argument `key` when it is a number, else `fallback` (for a family's own formula).
double number_arg(const json& args, const char* key, double fallback);

double attention_flops(const MixingFlopsQuery& q);           // args: window / segment_size when present
double chunked_recurrence_flops(const MixingFlopsQuery& q);  // args: chunk_size or mini_batch (default 64)
double deep_memory_flops(const MixingFlopsQuery& q);         // args: expansion (E), and the chunk as above
MixingFlops sum_of(MixingFlops a, MixingFlops b);             // a hybrid inside one mixer (attention + memory)

// The mean over positions [first, first + count) of the keys a causal token attends: t+1, capped at `window`
// (> 0), or (t mod segment)+1 when `segment` > 0.
double mean_attended_keys(int64_t first, int64_t count, int64_t window, int64_t segment);

}  // namespace mnemo
