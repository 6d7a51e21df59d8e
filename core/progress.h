// Progress output helpers shared by long-running commands and reports.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace mnemo {

// 42 -> "42s", 125 -> "2m05s", 7300 -> "2h01m".
std::string format_duration(double seconds);
// The inverse of format_duration ("2m05s" -> 125, "2h01m" -> 7260, "42s" -> 42); nullopt if it is not one.
std::optional<double> parse_duration(const std::string& text);

// A training run's progress line, as `mnemo train` prints it (every log_every steps) and a sweep reads it
// back from its worker's train.log:
//   [run 3] step 40/200 | loss 2.3100 | ppl 10.0744 | val ppl 12.3000 | lr 1.00e-03 | 5400 tok/s | ETA 2m05s
// (ppl only for language modelling; the held-out metric is "-" before the first evaluation).
struct TrainProgress {
  int64_t run_id = 0, step = 0, steps = 0;
  double loss = NAN;
  bool show_ppl = false;   // language modelling: exp(loss) after the loss
  std::string held_name;   // the held-out split and primary metric, e.g. "test accuracy", "val ppl"
  double held = NAN;       // NaN: not evaluated yet
  double lr = NAN, tokens_per_s = 0, eta_s = 0;
};
std::string format_train_progress(const TrainProgress& p);
// nullopt for any other line (a data-preparation note, the run's JSON summary, an error).
std::optional<TrainProgress> parse_train_progress(const std::string& line);

// A number as the progress lines print it: 4 decimals below 1000, else 1.
std::string format_progress_number(double v);

}  // namespace mnemo
