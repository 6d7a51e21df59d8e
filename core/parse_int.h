// A whole string read as an integer ("12" yes; "12x", "", "1.5", out of range no).
#pragma once
#include <optional>
#include <string>

namespace mnemo {

inline std::optional<long long> parse_whole_int(const std::string& text) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

}  // namespace mnemo
