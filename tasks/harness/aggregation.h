// lm-eval's aggregation and standard errors (lm_eval/api/metrics.py): mean, perplexity (exp(-mean ll)),
// weighted_perplexity (exp(-Σ ll / Σ weight)), weighted_mean (Σ a / Σ b over [a, b] pairs), bits_per_byte (-Σ ll / Σ bytes / ln 2); stderr: mean_stderr
// (sample stdev / sqrt(n)) for means, bootstrap for perplexity (lm-eval's: 100000 iterations in chunks of 1000, chunk i
// drawn from CPython's random.Random(i), reproduced exactly: tasks/harness/py_compat.h); weighted_perplexity,
// weighted_mean and bits_per_byte have none ("N/A"), as in lm-eval. The recall tasks (docs/tasks.md#recall-intensive-qa) add np_mean (their
// `contains`: numpy.mean, so lm-eval reports no stderr) and squad_v2_exact / squad_v2_f1 (Hugging Face's squad_v2
// metric over per-document {id, exact, f1, has_ans, no_answer_probability}, 0-100 scale; stderr "N/A").
#pragma once
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo::harness {

// `values`: per-document values of one metric (numbers, or [ll, weight] pairs for the weighted aggregations).
double aggregate(const std::string& aggregation, const std::vector<json>& values);
// NaN when lm-eval reports "N/A".
double aggregate_stderr(const std::string& aggregation, const std::vector<json>& values, int64_t bootstrap_iters = 100000);

}  // namespace mnemo::harness
