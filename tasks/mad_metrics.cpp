#include "tasks/mad_metrics.h"

#include <string>

#include "core/common.h"
#include "synthetic/example.h"  // kIgnoreLabel

namespace mnemo {

namespace {
struct ClassCounts {
  std::vector<int64_t> tp, fp, fn;
  explicit ClassCounts(int64_t c) : tp(c, 0), fp(c, 0), fn(c, 0) {}
  void add(int64_t pred, int64_t label) {
    if (pred == label) {
      ++tp[label];
    } else {
      ++fp[pred];
      ++fn[label];
    }
  }
  // torchmetrics macro: classes with tp + fp + fn == 0 get weight 0; recall 0/0 -> 0.
  double macro() const {
    double sum = 0;
    int64_t n = 0;
    for (size_t c = 0; c < tp.size(); ++c) {
      if (tp[c] + fp[c] + fn[c] == 0) continue;
      ++n;
      if (tp[c] + fn[c] > 0) sum += static_cast<double>(tp[c]) / static_cast<double>(tp[c] + fn[c]);
    }
    return n ? sum / n : 0.0;
  }
};
}  // namespace

MadAccuracy mad_accuracy(const std::vector<std::vector<int64_t>>& preds,
                         const std::vector<std::vector<int64_t>>& labels, int64_t num_classes,
                         int64_t batch_size) {
  if (preds.size() != labels.size())
    throw Error("mad accuracy: " + std::to_string(preds.size()) + " predictions for " +
                std::to_string(labels.size()) + " examples");
  if (num_classes <= 0 || batch_size <= 0) throw Error("mad accuracy: num_classes and batch_size must be > 0");
  MadAccuracy r;
  ClassCounts all(num_classes);
  ClassCounts batch(num_classes);
  int64_t correct = 0, examples_with_labels = 0, in_batch = 0, weighted_n = 0;
  double example_sum = 0, batched_sum = 0;
  auto close_batch = [&] {
    if (in_batch == 0) return;
    batched_sum += batch.macro() * in_batch;
    weighted_n += in_batch;
    batch = ClassCounts(num_classes);
    in_batch = 0;
  };
  for (size_t e = 0; e < labels.size(); ++e) {
    if (preds[e].size() != labels[e].size())
      throw Error("mad accuracy: example " + std::to_string(e) + " has " + std::to_string(preds[e].size()) +
                  " predictions for " + std::to_string(labels[e].size()) + " labels");
    int64_t n = 0, c = 0;
    for (size_t i = 0; i < labels[e].size(); ++i) {
      const int64_t y = labels[e][i], yhat = preds[e][i];
      if (y == kIgnoreLabel) continue;
      if (y < 0 || y >= num_classes || yhat < 0 || yhat >= num_classes)
        throw Error("mad accuracy: example " + std::to_string(e) + " position " + std::to_string(i) +
                    ": label " + std::to_string(y) + " / prediction " + std::to_string(yhat) +
                    " outside [0, " + std::to_string(num_classes) + ")");
      all.add(yhat, y);
      batch.add(yhat, y);
      ++n;
      c += yhat == y;
    }
    r.n_labels += n;
    correct += c;
    if (n > 0) {
      ++examples_with_labels;
      example_sum += static_cast<double>(c) / n;
    }
    if (++in_batch == batch_size) close_batch();
  }
  close_batch();
  r.n_examples = static_cast<int64_t>(labels.size());
  r.macro_batched = weighted_n ? batched_sum / weighted_n : 0.0;
  r.macro = all.macro();
  r.micro = r.n_labels ? static_cast<double>(correct) / r.n_labels : 0.0;
  r.example_mean = examples_with_labels ? example_sum / examples_with_labels : 0.0;
  return r;
}

}  // namespace mnemo
