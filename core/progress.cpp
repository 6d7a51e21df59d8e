#include "core/progress.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mnemo {

std::string format_duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  return buf;
}

std::optional<double> parse_duration(const std::string& text) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i || j == text.size()) return std::nullopt;
    const double n = std::strtod(text.substr(i, j - i).c_str(), nullptr);
    const char unit = text[j];
    if (unit == 'h') total += 3600 * n;
    else if (unit == 'm') total += 60 * n;
    else if (unit == 's') total += n;
    else return std::nullopt;
    any = true;
    i = j + 1;
  }
  if (!any) return std::nullopt;
  return total;
}

std::string format_progress_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) < 1000 ? "%.4f" : "%.1f", v);
  return buf;
}

std::string format_train_progress(const TrainProgress& p) {
  std::string line = "[run " + std::to_string(p.run_id) + "] step " + std::to_string(p.step) + "/" +
                     std::to_string(p.steps) + " | loss " + format_progress_number(p.loss);
  if (p.show_ppl) line += " | ppl " + format_progress_number(std::exp(p.loss));
  line += " | " + p.held_name + " " + (std::isnan(p.held) ? std::string("-") : format_progress_number(p.held));
  char tail[160];
  std::snprintf(tail, sizeof tail, " | lr %.2e | %.0f tok/s | ETA %s", p.lr, p.tokens_per_s,
                format_duration(p.eta_s).c_str());
  return line + tail;
}

namespace {

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) return false;
  out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::optional<TrainProgress> parse_train_progress(const std::string& line) {
  std::vector<std::string> fields;  // split on " | "
  for (size_t at = 0;;) {
    const size_t bar = line.find(" | ", at);
    fields.push_back(line.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 3;
  }
  if (fields.size() < 6) return std::nullopt;
  TrainProgress p;
  // "[run N] step a/b"
  const std::string& head = fields[0];
  const size_t close = head.find("] step ");
  if (!starts_with(head, "[run ") || close == std::string::npos) return std::nullopt;
  const std::string counts = head.substr(close + 7);
  const size_t slash = counts.find('/');
  if (!parse_int(head.substr(5, close - 5), p.run_id) || slash == std::string::npos ||
      !parse_int(counts.substr(0, slash), p.step) || !parse_int(counts.substr(slash + 1), p.steps))
    return std::nullopt;
  bool has_loss = false, has_lr = false, has_tps = false, has_eta = false, has_held = false;
  for (size_t f = 1; f < fields.size(); ++f) {
    const std::string& s = fields[f];
    if (starts_with(s, "loss ") && !has_loss) {
      if (!parse_double(s.substr(5), p.loss)) return std::nullopt;
      has_loss = true;
    } else if (starts_with(s, "ppl ") && has_loss && !has_held) {
      p.show_ppl = true;
    } else if (starts_with(s, "lr ")) {
      if (!parse_double(s.substr(3), p.lr)) return std::nullopt;
      has_lr = true;
    } else if (s.size() > 6 && s.compare(s.size() - 6, 6, " tok/s") == 0) {
      if (!parse_double(s.substr(0, s.size() - 6), p.tokens_per_s)) return std::nullopt;
      has_tps = true;
    } else if (starts_with(s, "ETA ")) {
      const auto d = parse_duration(s.substr(4));
      if (!d) return std::nullopt;
      p.eta_s = *d;
      has_eta = true;
    } else if (has_loss && !has_held) {  // "<split> <metric> <value or ->"
      const size_t space = s.rfind(' ');
      if (space == std::string::npos || space == 0) return std::nullopt;
      p.held_name = s.substr(0, space);
      const std::string value = s.substr(space + 1);
      if (value != "-" && !parse_double(value, p.held)) return std::nullopt;
      has_held = true;
    } else {
      return std::nullopt;
    }
  }
  if (!has_loss || !has_held || !has_lr || !has_tps || !has_eta) return std::nullopt;
  return p;
}

}  // namespace mnemo
