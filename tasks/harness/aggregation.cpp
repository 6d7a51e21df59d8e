// lm-eval aggregation and standard errors, operation for operation (lm_eval/api/metrics.py: mean, perplexity,
// weighted_mean, weighted_perplexity, bits_per_byte, sample_stddev, mean_stderr, bootstrap_stderr,
// _bootstrap_internal_no_mp, stderr_for_metric; lm_eval/evaluator_utils.py: "N/A" for n <= 1).
// Sums run left to right like CPython <= 3.11's sum() of floats (3.12+ sums with compensation: last-bit
// differences). The bootstrap draws from CPython's Mersenne Twister seeded as lm-eval seeds it (one
// random.Random(i) per chunk of min(1000, iters) resamples, choices(xs, k=len(xs))), so its value equals
// lm-eval's, not just its distribution.
#include "tasks/harness/aggregation.h"

#include <cmath>
#include <limits>
#include <map>

#include "tasks/harness/py_compat.h"

namespace mnemo::harness {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number(const json& v, const std::string& aggregation) {
  if (v.is_number()) return v.get<double>();
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  throw Error("aggregation '" + aggregation + "': expected a number per document, got " + json_excerpt(v));
}

std::pair<double, double> pair_of(const json& v, const std::string& aggregation) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
    throw Error("aggregation '" + aggregation + "': expected [loglikelihood, weight] per document, got " + json_excerpt(v));
  return {v[0].get<double>(), v[1].get<double>()};
}

double mean(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs) s += x;
  return s / static_cast<double>(xs.size());
}

// sample_stddev(arr) = sqrt(sum((x - mu) ** 2) / (n - 1)); mean_stderr = sample_stddev / sqrt(n)
double sample_stddev(const std::vector<double>& xs) {
  const double mu = mean(xs);
  double s = 0;
  for (double x : xs) s += (x - mu) * (x - mu);
  return std::sqrt(s / static_cast<double>(xs.size() - 1));
}

double weighted_mean(const std::vector<std::pair<double, double>>& items) {
  double a = 0, b = 0;
  for (const auto& [ll, w] : items) {
    a += ll;
    b += w;  // Python sums int weights exactly; doubles are exact below 2^53
  }
  return a / b;
}

std::vector<double> numbers(const std::vector<json>& values, const std::string& aggregation) {
  std::vector<double> xs;
  xs.reserve(values.size());
  for (const auto& v : values) xs.push_back(number(v, aggregation));
  return xs;
}

void require_values(const std::vector<json>& values, const std::string& aggregation) {
  if (values.empty()) throw Error("aggregation '" + aggregation + "': no documents to aggregate");
}

// Hugging Face datasets' squad_v2 metric (_compute, make_eval_dict, apply_no_ans_threshold) over the per-document
// objects {"id", "exact", "f1", "has_ans", "no_answer_probability"}: questions are keyed by id (a later document
// with the same id replaces the earlier one's scores and keeps its place), no_answer_probability is stored as
// float32 and a question whose probability exceeds no_answer_threshold 1.0 scores float(not has_ans); the result is
// 100 * the sum (in first-occurrence order) / the number of ids.
double squad_v2(const std::string& aggregation, const std::vector<json>& values) {
  const std::string key = aggregation == "squad_v2_exact" ? "exact" : "f1";
  std::vector<std::string> order;
  std::map<std::string, const json*> last;
  for (const auto& v : values) {
    if (!v.is_object() || !v.contains("id") || !v.contains(key) || !v.contains("has_ans") ||
        !v.contains("no_answer_probability"))
      throw Error("aggregation '" + aggregation +
                  "': expected {id, exact, f1, has_ans, no_answer_probability} per document, got " + json_excerpt(v));
    const std::string id = v["id"].is_string() ? v["id"].get<std::string>() : v["id"].dump();
    if (!last.count(id)) order.push_back(id);
    last[id] = &v;
  }
  double sum = 0;
  for (const auto& id : order) {
    const json& v = *last[id];
    const float na = static_cast<float>(number(v["no_answer_probability"], aggregation));
    sum += static_cast<double>(na) > 1.0 ? (v["has_ans"].get<bool>() ? 0.0 : 1.0) : number(v[key], aggregation);
  }
  return 100.0 * sum / static_cast<double>(order.size());
}
}  // namespace

double aggregate(const std::string& aggregation, const std::vector<json>& values) {
  require_values(values, aggregation);
  if (aggregation == "mean" || aggregation == "np_mean") return mean(numbers(values, aggregation));
  if (aggregation == "squad_v2_exact" || aggregation == "squad_v2_f1") return squad_v2(aggregation, values);
  if (aggregation == "perplexity") return std::exp(-mean(numbers(values, aggregation)));
  if (aggregation == "weighted_perplexity" || aggregation == "bits_per_byte" || aggregation == "weighted_mean") {
    std::vector<std::pair<double, double>> items;
    items.reserve(values.size());
    for (const auto& v : values) items.push_back(pair_of(v, aggregation));
    const double wm = weighted_mean(items);
    if (aggregation == "weighted_mean") return wm;
    return aggregation == "bits_per_byte" ? -wm / std::log(2.0) : std::exp(-wm);
  }
  throw Error("unknown aggregation '" + aggregation +
              "' (known: mean, np_mean, perplexity, weighted_perplexity, weighted_mean, bits_per_byte, squad_v2_exact, squad_v2_f1)");
}

double aggregate_stderr(const std::string& aggregation, const std::vector<json>& values, int64_t bootstrap_iters) {
  require_values(values, aggregation);
  if (bootstrap_iters <= 0 || values.size() <= 1) return kNaN;  // lm-eval: "N/A"
  if (aggregation == "mean") return sample_stddev(numbers(values, aggregation)) / std::sqrt(static_cast<double>(values.size()));
  if (aggregation == "perplexity") {
    // bootstrap_stderr(perplexity, xs, iters): iters // chunk chunks, chunk i drawn from random.Random(i).
    const std::vector<double> xs = numbers(values, aggregation);
    const int64_t chunk = std::min<int64_t>(1000, bootstrap_iters);
    std::vector<double> replicates;
    replicates.reserve(static_cast<size_t>(bootstrap_iters / chunk * chunk));
    for (int64_t i = 0; i < bootstrap_iters / chunk; ++i) {
      py::Random rnd(static_cast<uint64_t>(i));
      for (int64_t c = 0; c < chunk; ++c) {
        double s = 0;
        for (size_t k = 0; k < xs.size(); ++k) s += xs[rnd.choice_index(xs.size())];
        replicates.push_back(std::exp(-(s / static_cast<double>(xs.size()))));
      }
    }
    return sample_stddev(replicates);
  }
  if (aggregation == "weighted_perplexity" || aggregation == "bits_per_byte" || aggregation == "weighted_mean")
    return kNaN;  // not bootstrappable
  // numpy.mean and the squad_v2 aggregations are functions lm-eval's stderr_for_metric does not know: "N/A".
  if (aggregation == "np_mean" || aggregation == "squad_v2_exact" || aggregation == "squad_v2_f1") return kNaN;
  throw Error("unknown aggregation '" + aggregation +
              "' (known: mean, np_mean, perplexity, weighted_perplexity, weighted_mean, bits_per_byte, squad_v2_exact, squad_v2_f1)");
}

}  // namespace mnemo::harness
