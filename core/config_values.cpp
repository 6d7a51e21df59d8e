#include "core/config_values.h"

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

json key_value_pairs_to_json(const std::vector<std::string>& pairs) {
  json out = json::object();
  for (const auto& p : pairs) {
    const auto eq = p.find('=');
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
