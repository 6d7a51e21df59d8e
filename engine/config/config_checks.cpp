#include "engine/config/config_checks.h"

#include <cmath>
#include <string>

#include "runtime/mixed_precision.h"

namespace mnemo {

namespace {

struct Rule {
  const char* key;
  bool integer;
  double lo, hi;          // bounds
  bool lo_open, hi_open;  // true: the bound itself is excluded
};

constexpr double kInf = HUGE_VAL;

// The bound as a user reads it: ">= 1", "> 0", "in [0, 1)".
std::string describe(const Rule& r) {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  if (r.hi == kInf) return std::string(r.lo_open ? "> " : ">= ") + num(r.lo);
  return "in " + std::string(r.lo_open ? "(" : "[") + num(r.lo) + ", " + num(r.hi) + (r.hi_open ? ")" : "]");
}

const Rule kRules[] = {
    // counts
    {"steps", true, 1, kInf, false, false},
    {"batch_size", true, 1, kInf, false, false},
    {"eval_every", true, 1, kInf, false, false},
    {"log_every", true, 1, kInf, false, false},
    {"eval_batch_size", true, 1, kInf, false, false},
    {"n_train", true, 0, kInf, false, false},
    {"n_test", true, 0, kInf, false, false},
    {"grad_accum", true, 1, kInf, false, false},
    {"warmup_steps", true, -1, kInf, false, false},
    {"val_tokens", true, 0, kInf, false, false},
    {"d_model", true, 1, kInf, false, false},
    {"n_layers", true, 1, kInf, false, false},
    {"n_heads", true, 1, kInf, false, false},
    // optimiser and schedule
    {"lr", false, 0, kInf, true, false},
    {"beta1", false, 0, 1, false, true},
    {"beta2", false, 0, 1, false, true},
    {"adam_eps", false, 0, kInf, true, false},
    {"weight_decay", false, 0, kInf, false, false},
    {"grad_clip", false, 0, kInf, false, false},
    {"warmup_frac", false, 0, 1, false, false},
    {"min_lr_ratio", false, 0, 1, false, false},
    {"early_stop_acc", false, 0, 1, false, false},
    // skeleton
    {"mlp_ratio", false, 0, kInf, true, false},
    {"norm_eps", false, 0, kInf, true, false},
};

// Every number in `v` (nested arrays/objects included) is finite.
void check_finite(const std::string& where, const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    throw Error("config key '" + where + "' must be a finite number, got " + json_excerpt(v));
  if (v.is_structured())
    for (auto it = v.begin(); it != v.end(); ++it) check_finite(where, it.value());
}

}  // namespace

void validate_run_config(const json& resolved) {
  if (!resolved.is_object()) throw Error("the run configuration must be a JSON object");
  for (auto it = resolved.begin(); it != resolved.end(); ++it) check_finite(it.key(), it.value());
  for (const Rule& r : kRules) {
    if (!resolved.contains(r.key)) continue;
    const json& v = resolved.at(r.key);
    const std::string key = std::string("config key '") + r.key + "'";
    if (!v.is_number()) throw Error(key + " expects a number, got " + json_excerpt(v));
    const double x = v.get<double>();
    if (r.integer && (v.is_number_float() && x != std::floor(x)))
      throw Error(key + " expects a number (an integer), got " + json_excerpt(v));
    const bool below = r.lo_open ? !(x > r.lo) : !(x >= r.lo);
    const bool above = r.hi_open ? !(x < r.hi) : !(x <= r.hi);
    if (below || above) throw Error(key + " must be " + describe(r) + ", got " + json_excerpt(v));
  }
  if (resolved.contains("precision") && resolved["precision"].is_string()) {
    try {
      parse_precision(resolved["precision"].get<std::string>());
    } catch (const Error& e) {
      throw Error(std::string("config key 'precision': ") + e.what());
    }
  }
}

}  // namespace mnemo
