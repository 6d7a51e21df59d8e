// Language-model metrics (docs/tasks.md#language-modelling): token-weighted perplexity over non-overlapping
// windows, bits per byte, per-position buckets. One implementation for the trainer's validation
// and for `mnemo eval --task lm_ppl`; the model is reached only through a log-prob callback.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/common.h"

namespace mnemo {

// Σ NLL (nats) over predicted tokens, their count and the bytes of text they stand for.
struct NllTally {
  double nll = 0;
  int64_t tokens = 0;
  double bytes = 0;
  void add(const NllTally& o) {
    nll += o.nll;
    tokens += o.tokens;
    bytes += o.bytes;
  }
  double loss() const;  // nll / tokens (NaN when empty)
  double ppl() const;   // exp(loss)
  double bpb() const;   // nll / ln 2 / bytes (NaN without bytes)
};

struct WindowScore {
  NllTally total;
  std::vector<NllTally> buckets;  // by position p of the predicted token in its window: p / bucket_size
  int64_t windows = 0;
};

struct WindowScoring {
  int64_t length = 0;       // window length L (tokens fed to the model; L - 1 of them are predicted)
  int64_t max_tokens = 0;   // score at most this many tokens of the stream (0 = all)
  int64_t batch_size = 1;   // windows per forward
  int64_t bucket_size = 0;  // > 0: also tally per position bucket
};

// `read(start, n, out)` copies stream tokens [start, start + n); `logprobs(ids [B, L] int64)` returns
// the log-probabilities of ids[:, 1:] given their prefixes, [B, L - 1] (any float dtype, any device).
// The stream [0, min(n, max_tokens)) is cut into windows [kL, (k+1)L), each an independent request
// (fresh state); the first token of each window is not predicted; a last partial window of >= 2
// tokens is scored on its own. `byte_lengths[id]` = bytes of text of a token (bits per byte).
WindowScore score_windows(int64_t stream_tokens, const std::function<void(int64_t, int64_t, int64_t*)>& read,
                          const std::function<torch::Tensor(const torch::Tensor&)>& logprobs,
                          const std::vector<int32_t>& byte_lengths, const WindowScoring& opt);

}  // namespace mnemo
