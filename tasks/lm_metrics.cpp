#include "tasks/lm_metrics.h"

#include <cmath>

namespace mnemo {

double NllTally::loss() const { return tokens > 0 ? nll / double(tokens) : NAN; }
double NllTally::ppl() const { return std::exp(loss()); }
double NllTally::bpb() const { return bytes > 0 ? nll / std::log(2.0) / bytes : NAN; }

namespace {
// Adds one batch of windows [B, L] (their log-probs [B, L-1]) to the tallies.
void tally_batch(const std::vector<int64_t>& ids, int64_t rows, int64_t length, const torch::Tensor& lp,
                 const std::vector<int32_t>& byte_lengths, int64_t bucket_size, WindowScore& out) {
  auto nll = (-lp.to(torch::kCPU, torch::kFloat64)).contiguous();
  if (nll.dim() != 2 || nll.size(0) != rows || nll.size(1) != length - 1)
    throw Error("language-model scoring: the model returned log-probs of shape " +
                std::to_string(nll.size(0)) + "x" + std::to_string(nll.dim() > 1 ? nll.size(1) : 0) + ", expected " +
                std::to_string(rows) + "x" + std::to_string(length - 1));
  const double* v = nll.data_ptr<double>();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t p = 1; p < length; ++p) {
      const double x = v[b * (length - 1) + (p - 1)];
      if (!std::isfinite(x)) throw Error("language-model scoring: non-finite log-probability at window position " +
                                         std::to_string(p));
      const int64_t id = ids[b * length + p];
      const double bytes = id >= 0 && id < int64_t(byte_lengths.size()) ? byte_lengths[id] : 0;
      out.total.nll += x;
      out.total.tokens += 1;
      out.total.bytes += bytes;
      if (bucket_size > 0) {
        const size_t k = size_t(p / bucket_size);
        if (out.buckets.size() <= k) out.buckets.resize(k + 1);
        out.buckets[k].nll += x;
        out.buckets[k].tokens += 1;
        out.buckets[k].bytes += bytes;
      }
    }
}
}  // namespace

WindowScore score_windows(int64_t stream_tokens, const std::function<void(int64_t, int64_t, int64_t*)>& read,
                          const std::function<torch::Tensor(const torch::Tensor&)>& logprobs,
                          const std::vector<int32_t>& byte_lengths, const WindowScoring& opt) {
  if (opt.length < 2) throw Error("language-model scoring: window length must be >= 2, got " + std::to_string(opt.length));
  if (opt.batch_size < 1) throw Error("language-model scoring: batch size must be >= 1");
  const int64_t n = opt.max_tokens > 0 ? std::min(stream_tokens, opt.max_tokens) : stream_tokens;
  const int64_t L = opt.length, full = n / L, rest = n - full * L;
  WindowScore out;
  std::vector<int64_t> ids;
  for (int64_t w = 0; w < full; w += opt.batch_size) {
    const int64_t rows = std::min(opt.batch_size, full - w);
    ids.resize(size_t(rows * L));
    read(w * L, rows * L, ids.data());
    auto t = torch::from_blob(ids.data(), {rows, L}, torch::kInt64).clone();
    tally_batch(ids, rows, L, logprobs(t), byte_lengths, opt.bucket_size, out);
    out.windows += rows;
  }
  if (rest >= 2) {
    ids.resize(size_t(rest));
    read(full * L, rest, ids.data());
    auto t = torch::from_blob(ids.data(), {1, rest}, torch::kInt64).clone();
    tally_batch(ids, 1, rest, logprobs(t), byte_lengths, opt.bucket_size, out);
    out.windows += 1;
  }
  return out;
}

}  // namespace mnemo
