#include "cli/commands/commands.h"
#include "core/config_values.h"

namespace mnemo::cli {

json parse_scalar(const std::string& text) { return parse_value(text); }
json extras_to_params(const std::vector<std::string>& extras) { return flag_arguments_to_json(extras); }
json set_pairs_to_json(const std::vector<std::string>& pairs) { return key_value_pairs_to_json(pairs); }

}  // namespace mnemo::cli
