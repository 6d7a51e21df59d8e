// Values of the flat run configuration given on the command line, and the type rule every key
// obeys: one parser for `--set key=value` and for `--key value` flags.
#pragma once
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// "128" -> 128, "true" -> true, "[1,2]" -> [1,2], anything else -> the string itself. A number too large
// for a double ("1e999") throws Error naming it instead of becoming the string "1e999".
json parse_value(const std::string& text);

// Byte offset of the first byte that breaks UTF-8 (overlong forms, surrogates and > U+10FFFF included, as
// JSON requires), or std::string::npos when `text` is valid UTF-8.
size_t invalid_utf8_offset(const std::string& text);

// "key=value" strings (--set) -> {"key": value}; a later pair of the same key wins.
json key_value_pairs_to_json(const std::vector<std::string>& pairs);
// Applies key_value_pairs_to_json(pairs) over `config`.
void apply_overrides(json& config, const std::vector<std::string>& pairs);

// Left-over `--name value` / `--name=value` / bare `--flag` arguments -> {"name": value} with '-' -> '_'.
json flag_arguments_to_json(const std::vector<std::string>& arguments);

// Whether `value` may replace a key whose default is `def`: numbers for numbers (no float for an
// integer), booleans (or 0/1) for booleans, otherwise the same JSON type; a null default takes anything.
bool value_fits_default(const json& def, const json& value);
// `value` converted to the default's type (integer -> float, 0/1 -> bool); call after value_fits_default.
json coerce_to_default(const json& def, const json& value);
// What a key with default `def` expects, for "'<key>' expects a <this>, got ...": "number (an integer)"
// for an integer default (so 1.5 is refused in words), else the JSON type name ("number", "string", ...).
std::string expected_type_name(const json& def);

}  // namespace mnemo
