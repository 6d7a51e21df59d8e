#include "engine/config/config_checks.h"

#include <cmath>
#include <string>
#include <utility>

#include "engine/config/run_keys.h"
#include "runtime/mixed_precision.h"

namespace mnemo {

namespace {

constexpr double kInf = HUGE_VAL;

// Task parameters with a range (the task tables carry defaults and help, not ranges yet).
const std::pair<const char*, KeyRange> kTaskKeyRanges[] = {
    {"val_tokens", {true, 0, kInf, false, false}},  // the lm task's held-out tokens
};

void check_range(const json& resolved, const std::string& name, const KeyRange& r) {
  if (!resolved.contains(name)) return;
  const json& v = resolved.at(name);
  const std::string key = "config key '" + name + "'";
  if (!v.is_number()) throw Error(key + " expects a number, got " + json_excerpt(v));
  const double x = v.get<double>();
  if (r.integer && (v.is_number_float() && x != std::floor(x)))
    throw Error(key + " expects a number (an integer), got " + json_excerpt(v));
  const bool below = r.lo_open ? !(x > r.lo) : !(x >= r.lo);
  const bool above = r.hi_open ? !(x < r.hi) : !(x <= r.hi);
  if (below || above) throw Error(key + " must be " + r.describe() + ", got " + json_excerpt(v));
}

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
  for (const RunKey& k : run_keys())
    if (k.range) check_range(resolved, k.name, *k.range);
  for (const auto& [name, range] : kTaskKeyRanges) check_range(resolved, name, range);
  if (resolved.contains("precision") && resolved["precision"].is_string()) {
    try {
      parse_precision(resolved["precision"].get<std::string>());
    } catch (const Error& e) {
      throw Error(std::string("config key 'precision': ") + e.what());
    }
  }
}

}  // namespace mnemo
