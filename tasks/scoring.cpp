#include "tasks/scoring.h"

#include <cmath>
#include <map>
#include <set>

#include "core/common.h"

namespace mnemo {

namespace {
bool is_py_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f); }

// The text before the first occurrence of `sep` (Python s.split(sep)[0]).
std::string before(const std::string& s, const std::string& sep) {
  const auto p = s.find(sep);
  return p == std::string::npos ? s : s.substr(0, p);
}
}  // namespace

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_py_space(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string ascii_lower(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

double exact_match(const std::string& pred, const std::string& target) {
  return strip(pred) == strip(target) ? 1.0 : 0.0;
}

double contains_any(const std::string& pred, const std::vector<std::string>& golds) {
  const std::string p = ascii_lower(pred);
  for (const auto& g : golds)
    if (p.find(ascii_lower(g)) != std::string::npos) return 1.0;
  return 0.0;
}

std::string ruler_postprocess(const std::string& pred) {
  std::string s = strip(pred);
  for (char& c : s)
    if (static_cast<unsigned char>(c) <= 0x1f) c = '\n';
  return strip(s);
}

double string_match_all(const std::string& pred, const std::vector<std::string>& refs) {
  if (refs.empty()) throw Error("string_match_all: no reference strings");
  const std::string p = ascii_lower(pred);
  int64_t hit = 0;
  for (const auto& r : refs) hit += p.find(ascii_lower(r)) != std::string::npos;
  return static_cast<double>(hit) / static_cast<double>(refs.size());
}

const std::vector<std::string>& babilong_task_labels(const std::string& task) {
  static const std::vector<std::string> rooms = {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"};
  static const std::vector<std::string> yes_no = {"no", "yes"};
  static const std::map<std::string, std::vector<std::string>> labels = {
      {"qa1", rooms}, {"qa2", rooms}, {"qa3", rooms}, {"qa4", rooms},
      {"qa5", {"Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"}},
      {"qa6", yes_no},
      {"qa7", {"none", "one", "three", "two"}},
      {"qa8", {"apple", "football", "milk", "nothing"}},
      {"qa9", yes_no},
      {"qa10", {"maybe", "no", "yes"}},
      {"qa11", rooms}, {"qa12", rooms}, {"qa13", rooms},
      {"qa14", {"bedroom", "cinema", "kitchen", "office", "park", "school"}},
      {"qa15", {"cat", "mouse", "sheep", "wolf"}},
      {"qa16", {"gray", "green", "white", "yellow"}},
      {"qa17", yes_no}, {"qa18", yes_no},
      {"qa19", {"e,e", "e,n", "e,s", "n,e", "n,n", "n,w", "s,e", "s,s", "s,w", "w,n", "w,s", "w,w"}},
      {"qa20", {"bedroom", "bored", "garden", "hungry", "kitchen", "thirsty", "tired"}},
  };
  const auto it = labels.find(task);
  if (it == labels.end()) throw Error("BABILong: unknown task '" + task + "' (expected qa1..qa20)");
  return it->second;
}

std::string babilong_preprocess_output(const std::string& output) {
  std::string s = ascii_lower(output);
  s = before(s, ".");
  s = before(s, "<context>");
  s = before(s, "<example>");
  return s;
}

bool babilong_compare_answers(const std::string& target, const std::string& output,
                              const std::string& question, const std::vector<std::string>& labels) {
  const std::string out = babilong_preprocess_output(output);
  const std::string tgt = ascii_lower(target);
  const std::string q = ascii_lower(question);
  std::set<std::string> found;  // labels in the output that do not occur in the question
  for (const auto& raw : labels) {
    const std::string label = ascii_lower(raw);
    if (q.find(label) != std::string::npos) continue;
    if (out.find(label) != std::string::npos) found.insert(label);
  }
  if (tgt.find(',') != std::string::npos && tgt.size() > 3) {
    std::vector<std::string> subs;
    size_t start = 0;
    while (true) {
      const auto p = tgt.find(',', start);
      subs.push_back(tgt.substr(start, p == std::string::npos ? std::string::npos : p - start));
      if (p == std::string::npos) break;
      start = p + 1;
    }
    for (const auto& t : subs)
      if (!found.count(t)) return false;
    return found.size() == subs.size();
  }
  return found.count(tgt) == 1 && found.size() == 1;
}

bool substring_match(const std::string& target, const std::string& pred) {
  return ascii_lower(pred).find(ascii_lower(target)) != std::string::npos;
}

torch::Tensor per_example_accuracy(const torch::Tensor& logits_or_predictions, const torch::Tensor& labels,
                                   int64_t ignore) {
  const auto preds = logits_or_predictions.dim() == labels.dim() + 1 ? logits_or_predictions.argmax(-1)
                                                                      : logits_or_predictions;
  if (preds.sizes() != labels.sizes())
    throw Error("per_example_accuracy: predictions " + c10::str(preds.sizes()) + " but labels " +
                c10::str(labels.sizes()));
  const auto mask = labels != ignore;
  const auto correct = (preds == labels) & mask;
  return correct.sum(-1).to(torch::kFloat64) / mask.sum(-1).to(torch::kFloat64);  // NaN where no label
}

double example_accuracy(const std::vector<int64_t>& predictions, const std::vector<int64_t>& labels, int64_t ignore) {
  if (predictions.size() != labels.size())
    throw Error("example_accuracy: " + std::to_string(predictions.size()) + " predictions for " +
                std::to_string(labels.size()) + " labels");
  int64_t correct = 0, labelled = 0;
  for (size_t t = 0; t < labels.size(); ++t) {
    if (labels[t] == ignore) continue;
    ++labelled;
    correct += predictions[t] == labels[t];
  }
  return labelled ? static_cast<double>(correct) / static_cast<double>(labelled) : std::nan("");
}

double per_example_accuracy(const std::vector<std::vector<int64_t>>& preds,
                            const std::vector<std::vector<int64_t>>& labels, int64_t ignore) {
  if (preds.size() != labels.size())
    throw Error("per_example_accuracy: " + std::to_string(preds.size()) + " predictions for " +
                std::to_string(labels.size()) + " label rows");
  double sum = 0;
  int64_t counted = 0;
  for (size_t e = 0; e < preds.size(); ++e) {
    if (preds[e].size() != labels[e].size())
      throw Error("per_example_accuracy: example " + std::to_string(e) + " has " + std::to_string(preds[e].size()) +
                  " predictions and " + std::to_string(labels[e].size()) + " labels");
    const auto n = static_cast<int64_t>(labels[e].size());
    const double a = per_example_accuracy(torch::tensor(preds[e], torch::kInt64).view({1, n}),
                                          torch::tensor(labels[e], torch::kInt64).view({1, n}), ignore)
                         .item<double>();
    if (std::isnan(a)) continue;
    sum += a;
    ++counted;
  }
  return counted ? sum / static_cast<double>(counted) : 0.0;
}

double mean_percent(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double s = 0;
  for (double v : values) s += v;
  return std::round(s / static_cast<double>(values.size()) * 100.0 * 100.0) / 100.0;
}

}  // namespace mnemo
