#include "runtime/mixing_flops.h"

#include <algorithm>

namespace mnemo {

double number_arg(const json& args, const char* key, double fallback) {
  return args.contains(key) && args[key].is_number() ? args[key].get<double>() : fallback;
}

namespace {

// Σ_{t=a}^{b-1} (t+1) = (b(b+1) − a(a+1)) / 2.
double sum_of_positions(double a, double b) { return (b * (b + 1) - a * (a + 1)) / 2; }

}  // namespace

double mean_attended_keys(int64_t first, int64_t count, int64_t window, int64_t segment) {
  if (count <= 0) return 0;
  const double a = double(first), b = double(first + count);
  double total;
  if (segment > 0) {
    total = 0;  // (t mod S)+1 summed: whole segments contribute S(S+1)/2 each
    for (int64_t t = first; t < first + count; ++t) total += double(t % segment + 1);
  } else if (window > 0) {
    const double w = double(window);
    // t+1 while t < W, then W.
    const double split = std::clamp(w, a, b);
    total = sum_of_positions(a, split) + (b - split) * w;
  } else {
    total = sum_of_positions(a, b);
  }
  return total / double(count);
}

double attention_flops(const MixingFlopsQuery& q) {
  const int64_t window = int64_t(number_arg(q.args, "window", 0));
  const int64_t segment = int64_t(number_arg(q.args, "segment_size", 0));
  return 4 * mean_attended_keys(q.first_position, q.positions, window, segment) * q.d_model;
}

double chunked_recurrence_flops(const MixingFlopsQuery& q) {
  const double chunk = number_arg(q.args, "mini_batch", number_arg(q.args, "chunk_size", 64));
  const double state = 4 * q.d_model * q.head_dim;
  return q.decode ? state : 2 * chunk * q.d_model + state;
}

double deep_memory_flops(const MixingFlopsQuery& q) {
  return chunked_recurrence_flops(q) + 16 * number_arg(q.args, "expansion", 0) * q.d_model * q.head_dim;
}

MixingFlops sum_of(MixingFlops a, MixingFlops b) {
  return [a = std::move(a), b = std::move(b)](const MixingFlopsQuery& q) { return a(q) + b(q); };
}

}  // namespace mnemo
