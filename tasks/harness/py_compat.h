// Python semantics the lm-eval parity rules depend on: str methods over code points (isspace, strip,
// len, capitalize, re.split(r"\s+") piece counts), json.dumps's default output, numpy.argmax, and CPython's
// random.Random (MT19937 seeded with init_by_array, random(), getrandbits, shuffle, choices). With the latter
// lm-eval's bootstrap standard errors and its evaluator's seeded document shuffle are reproduced bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"

namespace mnemo::harness::py {

// UTF-8 -> code points; an invalid byte decodes to itself as one code point (never throws).
std::u32string decode_utf8(const std::string& s);
std::string encode_utf8(const std::u32string& s);

bool isspace(char32_t c);  // str.isspace (also re's \s for str patterns)
std::string strip(const std::string& s);
std::string lstrip(const std::string& s);
std::string rstrip(const std::string& s);
int64_t len(const std::string& s);  // len(str): code points
// str.capitalize(): first character upper-cased, the rest lower-cased. Case mapping covers ASCII and Latin-1
// (U+00C0–U+00FE); other characters are kept as they are.
std::string capitalize(const std::string& s);
// The one-character case mapping behind capitalize (ASCII and Latin-1; other characters unchanged), and str.lower()
// of a decoded string under that mapping (length-preserving, so Python's slicing arithmetic carries over).
char32_t lower(char32_t c);
char32_t upper(char32_t c);
std::u32string lower(std::u32string s);
// len(re.split(r"\s+", s)): 1 + the number of maximal runs of whitespace.
int64_t count_split_whitespace(const std::string& s);
// Every non-overlapping occurrence of `from` replaced by `to` (str.replace).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to);

// json.dumps(value) with Python's defaults: ensure_ascii (\uXXXX, surrogate pairs), ", " and ": " separators,
// sort_keys as given. Strings, integers, booleans, null, arrays and objects (floats: Error).
std::string json_dumps(const json& value, bool sort_keys = false);

// numpy.argmax: the first maximum; a NaN wins at its first position. Empty input: Error.
int64_t argmax(const std::vector<double>& values);

// CPython's random.Random (Modules/_randommodule.c, Lib/random.py of CPython 3.x).
class Random {
 public:
  explicit Random(uint64_t seed) { this->seed(seed); }
  void seed(uint64_t seed);  // random.seed(int): init_by_array over the 32-bit words of the seed
  uint32_t genrand_uint32();
  double random();                      // genrand_res53
  uint64_t getrandbits(int k);          // 1 <= k <= 64
  uint64_t randbelow(uint64_t n);       // _randbelow_with_getrandbits, n >= 1
  template <class T>
  void shuffle(std::vector<T>& x) {     // Random.shuffle
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[randbelow(i + 1)]);
  }
  size_t choice_index(size_t n) { return static_cast<size_t>(random() * static_cast<double>(n)); }  // choices(k=1)

 private:
  std::array<uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace mnemo::harness::py
