#include "cli/commands/commands.h"
#include "runtime/config.h"

namespace mnemo::cli {

json parse_scalar(const std::string& text) { return parse_value(text); }

json extras_to_params(const std::vector<std::string>& extras) {
  json params = json::object();
  for (size_t i = 0; i < extras.size(); ++i) {
    std::string a = extras[i];
    if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "'");
    a = a.substr(2);
    std::string value;
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < extras.size() && extras[i + 1].rfind("--", 0) != 0) {
      value = extras[++i];
    } else {
      value = "true";  // bare flag
    }
    for (auto& c : a)
      if (c == '-') c = '_';
    params[a] = parse_value(value);
  }
  return params;
}

json set_pairs_to_json(const std::vector<std::string>& pairs) {
  json j = json::object();
  apply_overrides(j, pairs);
  return j;
}

}  // namespace mnemo::cli
