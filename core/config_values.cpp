#include "core/config_values.h"

#include <cstdint>
#include <cstdio>

namespace mnemo {

json parse_value(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::out_of_range&) {
    throw Error("the number " + text + " is out of range (larger than a double can hold)");
  } catch (const json::exception&) {
    return json(text);
  }
}

size_t invalid_utf8_offset(const std::string& text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int more;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) more = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) more = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) more = 3, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + more >= n) return i;  // truncated sequence
    for (int k = 1; k <= more; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += more + 1;
  }
  return std::string::npos;
}

json key_value_pairs_to_json(const std::vector<std::string>& pairs) {
  json out = json::object();
  for (const auto& p : pairs) {
    const auto eq = p.find('=');
    if (const size_t bad = invalid_utf8_offset(p); bad != std::string::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(p[bad]));
      throw Error("--set " + (eq == std::string::npos || bad < eq ? std::string("key") : "'" + p.substr(0, eq) + "' value") +
                  " is not valid UTF-8 (byte " + hex + " at offset " + std::to_string(bad) + ")");
    }
    if (eq == std::string::npos || eq == 0) throw Error("--set expects key=value, got '" + p + "'");
    try {
      out[p.substr(0, eq)] = parse_value(p.substr(eq + 1));
    } catch (const Error& e) {
      throw Error("config key '" + p.substr(0, eq) + "': " + e.what());
    }
  }
  return out;
}

void apply_overrides(json& config, const std::vector<std::string>& pairs) {
  config.update(key_value_pairs_to_json(pairs));
}

json flag_arguments_to_json(const std::vector<std::string>& arguments) {
  std::vector<std::string> pairs;
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::string a = arguments[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "'");
    a = a.substr(2);
    if (a.find('=') == std::string::npos) {
      const bool has_value = i + 1 < arguments.size() && arguments[i + 1].rfind("--", 0) != 0;
      a += "=" + (has_value ? arguments[++i] : std::string("true"));  // a bare flag is true
    }
    for (size_t c = 0; c < a.find('='); ++c)
      if (a[c] == '-') a[c] = '_';
    pairs.push_back(a);
  }
  return key_value_pairs_to_json(pairs);
}

bool value_fits_default(const json& def, const json& v) {
  if (def.is_number() && v.is_number()) return !(def.is_number_integer() && v.is_number_float());
  if (def.is_boolean() && (v.is_boolean() || v.is_number_integer())) return true;
  return def.type() == v.type() || def.is_null();
}

json coerce_to_default(const json& def, const json& v) {
  if (def.is_boolean() && v.is_number_integer()) return v.get<int64_t>() != 0;
  if (def.is_number_float() && v.is_number_integer()) return v.get<double>();
  return v;
}

std::string expected_type_name(const json& def) {
  if (def.is_number_integer()) return "number (an integer)";
  return def.type_name();
}

}  // namespace mnemo
