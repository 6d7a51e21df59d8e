// Shared basics: the error type every bad input ends in, JSON alias, small helpers.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace mnemo {

using json = nlohmann::json;

// Any user-facing failure (bad input, missing file, NaN loss, ...). The CLI prints
// "mnemo: error: <what>" and exits non-zero; messages name the file/field/value at fault.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Data directory: --data-dir flag (set_data_dir), else $MNEMO_DATA_DIR, else ../shared/data
// relative to the working directory or to the source tree, whichever exists.
void set_data_dir(const std::string& dir);
std::string data_dir();
// Path of a file under the data directory; throws Error naming the path if it is missing.
std::string data_path(const std::string& relative);

std::string read_text_file(const std::string& path);  // throws Error naming the path
json read_json_file(const std::string& path);          // throws Error naming path + parse error
std::string sha256_hex(const std::string& bytes);
std::string now_iso8601();
std::string hostname();
double wall_seconds();  // monotonic clock, seconds

}  // namespace mnemo
