// mad-lab's accuracy of argmax predictions (the MAD tasks' scoring rule, used by evaluate_mad_accuracy and the
// trainer's `accuracy_macro`; the report's aggregation over runs and settings is reports/mad_score.h).
#pragma once
#include <cstdint>
#include <vector>

namespace mnemo {

// mad-lab's test accuracy: torchmetrics MulticlassAccuracy(num_classes = V, ignore_index = -100,
// average = "macro") on argmax predictions, computed per batch and averaged over batches
// weighted by batch size (PyTorch Lightning's on_epoch mean of the logged batch values).
// Macro per batch = mean over classes c with tp_c + fp_c + fn_c > 0 of tp_c / (tp_c + fn_c)
// (0 when class c is only predicted). The other three are reported beside it.
struct MadAccuracy {
  double macro_batched = 0;  // MAD-faithful (reported)
  double macro = 0;          // macro over the whole set at once
  double micro = 0;          // correct / labelled positions
  double example_mean = 0;   // mean per example, then over examples (mnemo's token accuracy)
  int64_t n_labels = 0;
  int64_t n_examples = 0;
};
// preds[e][i] = argmax prediction at position i of example e; labels as in TokenExample.
MadAccuracy mad_accuracy(const std::vector<std::vector<int64_t>>& preds,
                         const std::vector<std::vector<int64_t>>& labels, int64_t num_classes,
                         int64_t batch_size = 128);

}  // namespace mnemo
