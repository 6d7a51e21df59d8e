#include "core/common.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace mnemo {
namespace fs = std::filesystem;

namespace {
std::string g_data_dir;  // set by --data-dir
}

void set_data_dir(const std::string& dir) { g_data_dir = dir; }

std::string data_dir() {
  if (!g_data_dir.empty()) return g_data_dir;
  if (const char* env = std::getenv("MNEMO_DATA_DIR"); env && *env) return env;
  for (const fs::path& candidate : {fs::path("../shared/data"), fs::path("shared/data"),
                                    fs::path(MNEMO_SOURCE_DIR) / ".." / "shared" / "data"}) {
    std::error_code ec;
    if (fs::is_directory(candidate, ec)) return fs::weakly_canonical(candidate).string();
  }
  return "../shared/data";
}

std::string data_path(const std::string& relative) {
  fs::path p = fs::path(data_dir()) / relative;
  if (!fs::exists(p)) {
    throw Error("data file not found: " + p.string() +
                " (set the data directory with --data-dir or MNEMO_DATA_DIR)");
  }
  return p.string();
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open file: " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
// One open object or array of the document being parsed: the keys an object has named so far.
struct JsonFrame {
  bool is_object = false;
  std::set<std::string> keys;
  std::string last_key;
};

// "a.b[]" for the key path of the innermost open container (arrays shown as "[]"), "" at the top level.
std::string frame_path(const std::vector<JsonFrame>& frames) {
  std::string path;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    if (frames[i].is_object) path += (path.empty() ? "" : ".") + text_excerpt(frames[i].last_key, 40);
    else path += "[]";
  }
  return path;
}
}  // namespace

std::string text_excerpt(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "\u2026";
}

std::string json_excerpt(const json& value, size_t max_chars) {
  return text_excerpt(value.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

json parse_json_text(const std::string& text, const std::string& source) {
  const std::string in_source = source.empty() ? "" : " in " + source;
  std::vector<JsonFrame> frames;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<int>(frames.size()) >= kMaxJsonDepth)
          throw Error("JSON" + in_source + " is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        frames.push_back(JsonFrame{event == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case json::parse_event_t::key: {
        JsonFrame& f = frames.back();
        f.last_key = parsed.get<std::string>();
        if (!f.keys.insert(f.last_key).second) {
          const std::string where = frame_path(frames);
          throw Error("duplicate key '" + text_excerpt(f.last_key) + "'" + in_source +
                      (where.empty() ? "" : " (in object '" + where + "')") +
                      ": JSON keeps only the last value; remove one of them");
        }
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {  // parse_error, or out_of_range.406: a number too large for a double (1e999)
    std::string what = e.what();
    if (const auto cut = what.find("] "); what.rfind("[json.exception.", 0) == 0 && cut != std::string::npos)
      what = what.substr(cut + 2);  // "[json.exception.parse_error.101] parse error ..." -> "parse error ..."
    what = text_excerpt(what, 200) + (e.id == 406 ? " (too large for a double)" : "");
    if (source.empty()) throw Error(what);
    throw Error((e.id == 406 ? "unreadable JSON in " : "malformed JSON in ") + source + ": " + what);
  }
}

json read_json_file(const std::string& path) { return parse_json_text(read_text_file(path), path); }

// FIPS 180-4 SHA-256, fed in pieces (a multi-gigabyte checkpoint is hashed as it streams from disk).
namespace {
const uint32_t kSha256Rounds[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
}  // namespace

void Sha256::compress(const unsigned char* block) {
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    const unsigned char* p = block + 4 * i;
    w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], hh = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = hh + S1 + ch + kSha256Rounds[i] + w[i];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += hh;
}

void Sha256::update(const char* data, size_t size) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  bytes_ += size;
  while (size > 0) {
    const size_t take = std::min(size, sizeof block_ - fill_);
    std::memcpy(block_ + fill_, p, take);
    fill_ += take;
    p += take;
    size -= take;
    if (fill_ == sizeof block_) {
      compress(block_);
      fill_ = 0;
    }
  }
}

std::string Sha256::hex_digest() {
  const uint64_t bit_len = bytes_ * 8;
  const char one = static_cast<char>(0x80), zero = 0;
  update(&one, 1);
  while (fill_ != 56) update(&zero, 1);
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((bit_len >> (8 * (7 - i))) & 0xff);
  update(length, 8);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int i = 7; i >= 0; --i) out.push_back(hex[(v >> (4 * i)) & 0xf]);
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  Sha256 h;
  std::vector<char> buf(size_t(1) << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw Error("cannot read " + path);
  return h.hex_digest();
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

double wall_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace mnemo
