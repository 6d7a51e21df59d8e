// Scoring rules of the recall-intensive QA tasks (docs/tasks.md#recall-intensive-qa), once for every task that uses them:
// `contains` (HazyResearch/prefix-linear-attention lm-eval-harness/lm_eval/tasks/based_*/task.py contains_score)
// and SQuAD v2's exact / F1 per question (the official SQuAD 2.0 script as Hugging Face datasets' `squad_v2`
// metric runs it: metrics/squad_v2/evaluate.py normalize_answer, get_tokens, compute_exact, compute_f1,
// get_raw_scores). The aggregation over documents (one value per question id, ×100) is in aggregation.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo::harness {

// re.search(re.escape(needle), haystack, re.IGNORECASE).start() over code points, -1 when absent; an empty needle
// is found at 0. Case folding is py::lower's (ASCII and Latin-1; Python folds all of Unicode).
int64_t find_ignore_case(const std::u32string& haystack, const std::u32string& needle);
int64_t find_ignore_case(const std::string& haystack, const std::string& needle);  // UTF-8 in, code points out

// contains_score(prediction, labels): 1 when any label occurs in the prediction (find_ignore_case), else 0.
// No labels: Error (Python's max() of an empty sequence raises).
int64_t contains_score(const std::string& prediction, const std::vector<std::string>& labels);

// normalize_answer: lower-case, drop ASCII punctuation (string.punctuation), replace the words a / an / the
// (regex \b(a|an|the)\b) by a space, collapse whitespace (" ".join(s.split())).
std::string squad_normalize_answer(const std::string& s);
// compute_exact / compute_f1 of one gold answer.
int64_t squad_exact(const std::string& gold, const std::string& pred);
double squad_f1(const std::string& gold, const std::string& pred);

// get_raw_scores for one question: golds whose normalized form is empty are dropped ([""] if none is left), then
// the maximum exact and F1 over the golds.
struct SquadScores {
  double exact = 0, f1 = 0;
};
SquadScores squad_v2_raw_scores(const std::vector<std::string>& golds, const std::string& pred);

}  // namespace mnemo::harness
