#include "tasks/harness/py_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mnemo::harness::py {

namespace {
// Decodes s; offsets (if given) receives each code point's first byte, then s.size(). An invalid byte becomes
// the code point of its value, one byte long.
std::u32string decode_utf8_offsets(const std::string& s, std::vector<size_t>* offsets) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (offsets) offsets->push_back(i);
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    char32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    bool ok = n >= 0;
    for (int k = 1; ok && k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    if (!ok) {
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n + 1;
  }
  if (offsets) offsets->push_back(s.size());
  return out;
}
}  // namespace

std::u32string decode_utf8(const std::string& s) { return decode_utf8_offsets(s, nullptr); }

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// CPython Py_UNICODE_ISSPACE: bidirectional class WS, B or S, or category Zs.
bool isspace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {
// Byte offsets [begin, end) of s with leading / trailing Python whitespace removed.
std::pair<size_t, size_t> strip_range(const std::string& s, bool left, bool right) {
  std::vector<size_t> offsets;  // byte offset of each code point, then s.size()
  const std::u32string u = decode_utf8_offsets(s, &offsets);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && isspace(u[b])) ++b;
  if (right)
    while (e > b && isspace(u[e - 1])) --e;
  // Byte offsets from the decoder (re-encoding would miscount invalid or overlong bytes: found by fuzzing).
  return {offsets[b], offsets[e]};
}
}  // namespace

std::string strip(const std::string& s) {
  const auto [b, e] = strip_range(s, true, true);
  return s.substr(b, e - b);
}
std::string lstrip(const std::string& s) { return s.substr(strip_range(s, true, false).first); }
std::string rstrip(const std::string& s) { return s.substr(0, strip_range(s, false, true).second); }

int64_t len(const std::string& s) { return static_cast<int64_t>(decode_utf8(s).size()); }

char32_t lower(char32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  return c;
}
char32_t upper(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  return c;
}
std::u32string lower(std::u32string s) {
  for (auto& c : s) c = lower(c);
  return s;
}

std::string capitalize(const std::string& s) {
  std::u32string u = decode_utf8(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? upper(u[i]) : lower(u[i]);
  return encode_utf8(u);
}

int64_t count_split_whitespace(const std::string& s) {
  int64_t pieces = 1;
  bool in_run = false;
  for (char32_t c : decode_utf8(s)) {
    const bool sp = isspace(c);
    if (sp && !in_run) ++pieces;
    in_run = sp;
  }
  return pieces;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) throw Error("replace_all: empty pattern");
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  return out.append(s, pos, std::string::npos);
}

namespace {
void dump_string(const std::string& s, std::string& out) {
  out += '"';
  char buf[16];
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out += static_cast<char>(c);
        } else if (c < 0x10000) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {  // surrogate pair
          const char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)));
          out += buf;
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          out += buf;
        }
    }
  }
  out += '"';
}

void dump(const json& v, bool sort_keys, std::string& out) {
  if (v.is_string()) {
    dump_string(v.get_ref<const std::string&>(), out);
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "true" : "false";
  } else if (v.is_null()) {
    out += "null";
  } else if (v.is_number_integer()) {
    out += v.dump();
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      dump(v[i], sort_keys, out);
    }
    out += ']';
  } else if (v.is_object()) {
    // nlohmann's json object is ordered by key already (std::map), which is Python's sort_keys order for
    // ASCII keys; without sort_keys Python keeps insertion order, which nlohmann::json does not keep.
    if (!sort_keys) throw Error("json_dumps: objects need sort_keys=true (key order is not kept)");
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      dump_string(it.key(), out);
      out += ": ";
      dump(it.value(), sort_keys, out);
    }
    out += '}';
  } else {
    throw Error("json_dumps: floating-point values are not supported (Python's float repr)");
  }
}
}  // namespace

std::string json_dumps(const json& value, bool sort_keys) {
  std::string out;
  dump(value, sort_keys, out);
  return out;
}

int64_t argmax(const std::vector<double>& values) {
  if (values.empty()) throw Error("argmax of an empty sequence");
  size_t best = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) return static_cast<int64_t>(i);
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int64_t>(best);
}

// ---- CPython random: init_genrand / init_by_array / genrand_uint32 (MT19937 reference code) ----
void Random::seed(uint64_t seed) {
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const size_t key_len = (seed >> 32) ? 2 : 1;
  mt_[0] = 19650218U;
  for (int i = 1; i < 624; ++i) mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  size_t i = 1, j = 0;
  for (size_t k = std::max<size_t>(624, key_len); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
    if (j >= key_len) j = 0;
  }
  for (size_t k = 623; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;
  mti_ = 624;
}

uint32_t Random::genrand_uint32() {
  static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
  if (mti_ >= 624) {
    int kk = 0;
    for (; kk < 624 - 397; ++kk) {
      const uint32_t y = (mt_[kk] & 0x80000000U) | (mt_[kk + 1] & 0x7fffffffU);
      mt_[kk] = mt_[kk + 397] ^ (y >> 1) ^ mag01[y & 1U];
    }
    for (; kk < 623; ++kk) {
      const uint32_t y = (mt_[kk] & 0x80000000U) | (mt_[kk + 1] & 0x7fffffffU);
      mt_[kk] = mt_[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1U];
    }
    const uint32_t y = (mt_[623] & 0x80000000U) | (mt_[0] & 0x7fffffffU);
    mt_[623] = mt_[396] ^ (y >> 1) ^ mag01[y & 1U];
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

double Random::random() {
  const uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t Random::getrandbits(int k) {
  if (k < 1 || k > 64) throw Error("getrandbits: k must be in [1, 64], got " + std::to_string(k));
  if (k <= 32) return genrand_uint32() >> (32 - k);
  // CPython fills 32-bit words from the least significant end; the last word keeps its top bits.
  const uint64_t lo = genrand_uint32();
  const uint64_t hi = genrand_uint32() >> (64 - k);
  return lo | (hi << 32);
}

uint64_t Random::randbelow(uint64_t n) {
  if (n == 0) throw Error("randbelow(0)");
  int k = 0;
  for (uint64_t v = n; v; v >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

}  // namespace mnemo::harness::py
