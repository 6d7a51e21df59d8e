// The scoring rules, each defined once and shared by every task (docs/tasks.md#evaluation-machinery):
// exact match, `contains`, RULER `string_match_all`, BABILong label sets (`compare_answers`) and
// substring, and the token-level accuracy of MQAR/MAD.
#pragma once
#include <torch/torch.h>
#include <cstdint>
#include <string>
#include <vector>

namespace mnemo {

// Python str.strip() over ASCII whitespace (space, \t\n\v\f\r and \x1c-\x1f).
std::string strip(const std::string& s);
std::string ascii_lower(const std::string& s);

// 1 if strip(pred) == strip(target), else 0.
double exact_match(const std::string& pred, const std::string& target);

// `contains` (docs/tasks.md#recall-intensive-qa): 1 if any gold string occurs in pred, case-insensitively, else 0.
double contains_any(const std::string& pred, const std::vector<std::string>& golds);

// RULER post-processing (docs/tasks.md#s-niah): strip; every char in [\x00-\x1f] -> "\n"; strip.
std::string ruler_postprocess(const std::string& pred);
// RULER string_match_all for one sample: fraction of refs r with r.lower() in pred.lower().
double string_match_all(const std::string& pred, const std::vector<std::string>& refs);

// BABILong (docs/tasks.md#babilong, booydar/babilong metrics.py).
// Label set of a task "qa1".."qa20" (as written in TASK_LABELS); Error for another name.
const std::vector<std::string>& babilong_task_labels(const std::string& task);
// lower-case; keep the text before the first ".", "<context>" and "<example>". (The reference
// also splits at "Question" after lower-casing, which never matches: reproduced as no cut.)
std::string babilong_preprocess_output(const std::string& output);
// The target must be the only task label found in the cut output, ignoring labels that occur in
// the question; targets with "," and length > 3 (qa8 "apple,milk") need every sub-target and
// nothing else.
bool babilong_compare_answers(const std::string& target, const std::string& output,
                              const std::string& question, const std::vector<std::string>& labels);
// The looser option (lm-eval's port): target.lower() in pred.lower().
bool substring_match(const std::string& target, const std::string& pred);

// Token-level accuracy (docs/tasks.md#mqar, zoology compute_metrics): per example, the mean of
// pred == label over its labelled positions (label != ignore); then the mean over the examples
// that have at least one labelled position. Returns 0 when none has. Sizes must match (Error).
double per_example_accuracy(const std::vector<std::vector<int64_t>>& preds,
                            const std::vector<std::vector<int64_t>>& labels, int64_t ignore = -100);
// The same rule on a batch: logits [B, T, V] (argmax) or predictions [B, T] against labels
// [B, T]; one value per row, NaN for rows without labels.
torch::Tensor per_example_accuracy(const torch::Tensor& logits_or_predictions, const torch::Tensor& labels,
                                   int64_t ignore = -100);

// One example's share of correct predictions over its labelled positions (label != ignore); NaN without labels.
// Sizes must match (Error).
double example_accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels,
                        int64_t ignore = -100);

// mean(values) * 100 rounded to 2 decimals (RULER/BABILong task score); 0 for no values.
double mean_percent(const std::vector<double>& values);

}  // namespace mnemo
