// `mnemo score`: predictions made elsewhere, scored with the task's own scorer (found through the
// task registry; EvalTask::score_prediction).
#pragma once
#include <string>

#include "core/common.h"

namespace mnemo {

// {"task", "metric", "n", "value" (mean, in %)[, "mode"]}. Error for a task without a text scorer,
// an unreadable file, a malformed line (file:line and field), or no predictions.
json score_predictions(const std::string& task, const std::string& predictions_path, const std::string& mode);

}  // namespace mnemo
