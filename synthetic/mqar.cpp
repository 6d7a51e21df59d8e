#include "synthetic/mqar.h"

#include <numeric>
#include <random>

namespace mnemo {

void validate(const MqarParams& p) {
  auto fail = [](const std::string& m) { throw Error("mqar: " + m); };
  if (p.seq_len <= 0 || p.seq_len % 2 != 0) fail("seq_len must be even and > 0, got " + std::to_string(p.seq_len));
  if (p.vocab_size <= p.seq_len)
    fail("vocab_size (" + std::to_string(p.vocab_size) + ") must exceed seq_len (" + std::to_string(p.seq_len) + ")");
  if (p.num_kv_pairs <= 0) fail("num_kv_pairs must be > 0");
  if (p.num_passes < 1) fail("num_passes must be >= 1");
  if (2 * p.num_kv_pairs * p.num_passes + 2 * p.num_kv_pairs > p.seq_len)
    fail("seq_len (" + std::to_string(p.seq_len) + ") too short for " + std::to_string(p.num_kv_pairs) +
         " key-value pairs: need 2*N*passes + 2*N <= seq_len");
  if (p.num_kv_pairs > p.vocab_size / 2 - 1) fail("vocab_size too small for num_kv_pairs distinct keys");
  if (!(p.power_a > 0)) fail("power_a must be > 0");
}

uint64_t example_seed(Split split, uint64_t base_seed, int64_t index) {
  const uint64_t half = uint64_t{1} << 31;
  uint64_t s = (base_seed + static_cast<uint64_t>(index)) % half;
  return split == Split::train ? s : half + s;
}

namespace {
// k distinct values from [lo, hi) uniformly (partial Fisher-Yates).
std::vector<int64_t> sample_distinct(std::mt19937_64& rng, int64_t lo, int64_t hi, int64_t k) {
  std::vector<int64_t> pool(hi - lo);
  std::iota(pool.begin(), pool.end(), lo);
  for (int64_t i = 0; i < k; ++i) {
    std::uniform_int_distribution<int64_t> d(i, static_cast<int64_t>(pool.size()) - 1);
    std::swap(pool[i], pool[d(rng)]);
  }
  pool.resize(k);
  return pool;
}
}  // namespace

TokenExample mqar_example(const MqarParams& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t N = p.num_kv_pairs, L = p.seq_len, V = p.vocab_size;
  const int64_t ctx = 2 * N * p.num_passes;
  auto keys = sample_distinct(rng, 1, V / 2, N);
  auto values = sample_distinct(rng, V / 2, V, N);

  std::vector<int64_t> examples(L + 1, 0), labels(L + 1, kIgnoreLabel);
  for (int64_t pass = 0; pass < p.num_passes; ++pass)
    for (int64_t i = 0; i < N; ++i) {
      examples[pass * 2 * N + 2 * i] = keys[i];
      examples[pass * 2 * N + 2 * i + 1] = values[i];
    }
  // Query gaps: N distinct g in [0, space) with p(g) ∝ a (g+1)^(a-1), drawn without replacement.
  const int64_t space = (L - ctx) / 2;
  std::vector<double> w(space);
  for (int64_t g = 0; g < space; ++g) w[g] = p.power_a * std::pow(static_cast<double>(g + 1), p.power_a - 1.0);
  std::vector<int64_t> gaps;
  for (int64_t i = 0; i < N; ++i) {
    std::discrete_distribution<int64_t> d(w.begin(), w.end());
    int64_t g = d(rng);
    gaps.push_back(g);
    w[g] = 0.0;
  }
  for (int64_t i = 0; i < N; ++i) {
    int64_t pos = ctx + 2 * gaps[i];
    examples[pos] = keys[i];
    labels[pos + 1] = values[i];  // shifted below: the target of the prediction at `pos`
  }
  TokenExample ex;
  ex.input_ids.assign(examples.begin(), examples.end() - 1);
  ex.labels.assign(labels.begin() + 1, labels.end());
  if (p.random_non_queries) {
    std::uniform_int_distribution<int64_t> tok(0, V - 1);
    for (auto& t : ex.input_ids)
      if (t == 0) t = tok(rng);
  }
  return ex;
}

}  // namespace mnemo
