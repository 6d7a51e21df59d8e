// Rank statistics for report rankings (e.g. our families' order against a paper's).
#pragma once
#include <cmath>
#include <vector>

namespace mnemo {

// Kendall's τ-b of paired samples: (concordant − discordant) / sqrt((n0 − ties_x)(n0 − ties_y)),
// n0 = n(n−1)/2 pairs (as scipy.stats.kendalltau). NaN for unequal lengths, fewer than two
// pairs, a constant side or a non-finite value.
inline double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return NAN;
  double concordant = 0, discordant = 0, ties_x = 0, ties_y = 0, pairs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return NAN;
    for (size_t j = i + 1; j < x.size(); ++j) {
      double dx = x[i] - x[j], dy = y[i] - y[j];
      pairs += 1;
      if (dx == 0) ties_x += 1;
      if (dy == 0) ties_y += 1;
      if (dx * dy > 0) concordant += 1;
      if (dx * dy < 0) discordant += 1;
    }
  }
  double denom = std::sqrt((pairs - ties_x) * (pairs - ties_y));
  return denom > 0 ? (concordant - discordant) / denom : NAN;
}

}  // namespace mnemo
