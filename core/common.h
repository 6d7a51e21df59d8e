// Shared basics: the error type every bad input ends in, JSON alias, small helpers.
#pragma once
#include <nlohmann/json.hpp>
#include <cstddef>
#include <cstdint>
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
// Every JSON document mnemo reads from a user goes through parse_json_text (read_json_file reads a file
// and calls it). On top of nlohmann's parser it refuses what nlohmann accepts silently:
//   - an object naming a key twice: nlohmann keeps the last, so `"lr": 0.001, ..., "lr": 0.5` would train
//     at 0.5; the error names the key, where it is (its enclosing keys) and `source`;
//   - nesting deeper than kMaxJsonDepth: dumping, copying or comparing such a value recurses once per level
//     and overflows the stack (a crash with no message at ~70 000 levels).
// Other errors are nlohmann's, prefixed "malformed JSON in <source>". `source` is a file name, or "file:line";
// empty for a caller that names the place itself (the message then names none).
constexpr int kMaxJsonDepth = 256;
json parse_json_text(const std::string& text, const std::string& source);
json read_json_file(const std::string& path);  // throws Error naming path + parse error
// A value as an error message quotes it: its JSON text, cut to at most `max_chars` bytes (at a UTF-8
// character boundary) with "…" appended when longer, so a 100 KB value does not flood the terminal.
std::string json_excerpt(const json& value, size_t max_chars = 60);
// The same cut for text that is not JSON (a line of a file, a command's output).
std::string text_excerpt(const std::string& text, size_t max_chars = 60);
// SHA-256 (FIPS 180-4) of data given in pieces; hex_digest() ends it (call it once).
class Sha256 {
 public:
  void update(const char* data, size_t size);
  std::string hex_digest();

 private:
  void compress(const unsigned char* block);
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64] = {};
  size_t fill_ = 0;
  uint64_t bytes_ = 0;
};
std::string sha256_hex(const std::string& bytes);
std::string sha256_file(const std::string& path);  // Error naming the file when it cannot be read
std::string now_iso8601();
std::string hostname();
double wall_seconds();  // monotonic clock, seconds

}  // namespace mnemo
