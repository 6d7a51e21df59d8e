// The parts of the Hugging Face tokenizer (tasks/hf_tokenizer.h) shared by its reader (tasks/hf_tokenizer_reader.cpp:
// tokenizer.json to the pipeline below) and its encoder (tasks/hf_tokenizer_encoder.cpp: text to ids and back):
// UTF-8 and byte-level helpers, PCRE2 patterns, the pipeline's pieces, and the tokenizer's state. Included by those
// two files only.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

#include "tasks/hf_tokenizer.h"

namespace mnemo {

namespace fs = std::filesystem;

namespace hf_detail {

// Ids are indices into a table: real vocabularies stay below 300 000; a file claiming more is refused rather
// than allocating a table for it.
constexpr int64_t kMaxTokenId = (1 << 22) - 1;

// ---- UTF-8 helpers ----

// Length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), else the
// length of its longest valid prefix as a negative number (-1 for a byte no sequence starts with). The
// negative form gives the "maximal subpart" that one U+FFFD replaces (Unicode 15, section 3.9; Rust's
// String::from_utf8_lossy, which the reference library's decoders use, does the same).
inline int utf8_step(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return -k;
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = utf8_step(s, i);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

// Each maximal invalid subpart becomes one U+FFFD.
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const int n = utf8_step(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += -n;
    }
  }
  return out;
}

// Decodes the (valid) UTF-8 character at s[i]; advances i.
inline char32_t next_codepoint(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

inline char32_t prev_codepoint(std::string_view s, size_t& i) {  // the character ending at s[i-1]; moves i to its start
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  const char32_t cp = next_codepoint(s, k);
  i = j;
  return cp;
}

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Unicode White_Space (Rust's char::is_whitespace, used for added tokens' lstrip/rstrip).
inline bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

inline void replace_every(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// GPT-2's byte <-> unicode table (openai/gpt-2 encoder.py bytes_to_unicode): printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order, so that every byte is a visible character.
struct ByteTable {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<char32_t, unsigned char> char_to_byte;
  ByteTable() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : 256 + next++;
      append_utf8(byte_to_char[b], cp);
      char_to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

inline const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// The token's bytes when every character is in the byte table; false otherwise.
inline bool byte_level_bytes(std::string_view token, std::string& out) {
  const auto& table = byte_table().char_to_byte;
  out.clear();
  size_t i = 0;
  while (i < token.size()) {
    if (utf8_step(token, i) < 0) return false;
    auto it = table.find(next_codepoint(token, i));
    if (it == table.end()) return false;
    out += static_cast<char>(it->second);
  }
  return true;
}

// ---- PCRE2 ----

// Per-thread match state: a compiled pattern may be shared between threads, its match data and JIT stack not.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    if (stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

inline MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &code,
                        &offset, nullptr);
    if (!re_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(code, msg, sizeof msg);
      throw Error(where + ": regex " + json(pattern).dump() + " does not compile (PCRE2, at offset " +
                  std::to_string(offset) + "): " + reinterpret_cast<char*>(msg));
    }
    jit_ = pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(re_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for every non-empty match in `subject` (valid UTF-8), left to right.
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    MatchScratch& s = scratch();
    const auto* p = reinterpret_cast<PCRE2_SPTR>(subject.data());
    size_t start = 0;
    while (start <= subject.size()) {
      const int rc = jit_ ? pcre2_jit_match(re_, p, subject.size(), start, 0, s.data, s.context)
                          : pcre2_match(re_, p, subject.size(), start, PCRE2_NO_UTF_CHECK, s.data, s.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw Error("tokenizer regex " + json(pattern_).dump() + ": " + reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        f(b, e);
        start = e;
      } else {  // an empty match: step over one character
        if (b >= subject.size()) return;
        const int n = utf8_step(subject, b);
        start = b + (n > 0 ? n : 1);
      }
    }
  }

 private:
  std::string pattern_;
  pcre2_code* re_ = nullptr;
  bool jit_ = false;
};

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

inline std::string regex_quote(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::strchr("\\^$.|?*+()[]{}", c) && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

// ---- pipeline pieces ----

struct Normalizer {
  enum Kind { kNfc, kNfkc, kPrepend, kReplace } kind;
  std::string a, b;  // Prepend: a; Replace: a -> b
};

// A pre-token: a view into the text or into the encoder's scratch strings; at_start: it begins at offset 0 of
// the original text (Metaspace's prepend_scheme "first").
struct Piece {
  std::string_view text;
  bool at_start;
};

struct PreTokenizer {
  enum Kind { kByteLevel, kSplit, kMetaspace } kind;
  bool add_prefix_space = false;  // ByteLevel
  std::shared_ptr<Regex> regex;   // ByteLevel(use_regex) / Split
  bool remove_matches = false;    // Split behavior Removed
  bool invert = false;            // Split
  std::string replacement;        // Metaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;              // Metaspace
};

struct Decoder {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;  // Replace: a -> b; Strip: a = content; Metaspace: a = replacement
  int start = 0, stop = 0;
  bool prepend = true;  // Metaspace: prepend_scheme != never
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, normalized, lstrip, rstrip;
};

// Leftmost-longest matching of a set of literal tokens (the library uses aho-corasick, LeftmostLongest).
class TokenMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    by_first_[static_cast<unsigned char>(t->content[0])].push_back(t);
    any_ = true;
  }
  void finish() {
    for (auto& list : by_first_)
      std::stable_sort(list.begin(), list.end(),
                       [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
  }
  bool empty() const { return !any_; }
  // Splits `text` into text segments (id -1) and matched tokens; calls f(segment, id, at_offset).
  template <class F>
  void split(std::string_view text, F&& f) const {
    size_t seg_start = 0, pos = 0;
    while (pos < text.size()) {
      const auto& cands = by_first_[static_cast<unsigned char>(text[pos])];
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : cands)
        if (text.compare(pos, t->content.size(), t->content) == 0) {
          hit = t;
          break;
        }
      if (!hit) {
        ++pos;
        continue;
      }
      size_t b = pos, e = pos + hit->content.size();
      if (hit->lstrip) {
        size_t i = b;
        while (i > seg_start) {
          size_t j = i;
          if (!is_white_space(prev_codepoint(text, j))) break;
          i = j;
        }
        b = i;
      }
      if (hit->rstrip) {
        size_t i = e;
        while (i < text.size()) {
          size_t j = i;
          if (!is_white_space(next_codepoint(text, j))) break;
          i = j;
        }
        e = i;
      }
      if (b > seg_start) f(text.substr(seg_start, b - seg_start), -1, seg_start);
      f(std::string_view(), hit->id, b);
      seg_start = pos = e;
    }
    if (seg_start < text.size()) f(text.substr(seg_start), -1, seg_start);
  }

 private:
  std::array<std::vector<const AddedToken*>, 256> by_first_;
  bool any_ = false;
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace hf_detail

struct HfTokenizer::Impl {
  std::string path, id;
  // model
  std::unordered_map<std::string, int32_t> vocab;        // token as stored -> id
  std::unordered_map<std::string, int32_t> bytes_vocab;  // byte-level: the token's bytes -> id
  std::vector<std::string> id_to_token;                  // model vocabulary and added tokens
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;
  bool byte_level = false;      // a ByteLevel pre-tokenizer maps bytes to the GPT-2 alphabet
  std::array<int32_t, 256> byte_unit{};  // byte-level: id of each byte's character, -1 if not in the vocabulary
  std::array<int32_t, 256> byte_fallback_id{};  // <0xNN> ids when byte_fallback, else -1
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int32_t unk_id = -1;
  // pipeline
  std::vector<hf_detail::Normalizer> normalizers;
  std::vector<hf_detail::PreTokenizer> pre_tokenizers;
  std::vector<hf_detail::Decoder> decoders;
  bool has_decoder = false;
  std::deque<hf_detail::AddedToken> added;
  std::unordered_map<int32_t, const hf_detail::AddedToken*> added_by_id;
  hf_detail::TokenMatcher raw_matcher, normalized_matcher;
  int64_t bos = -1, eos = -1, pad = -1, vocab_n = 0;
  // pre-token -> ids (the reference library caches the same way; bounded, lookups share a lock)
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCacheEntries = 1 << 17, kCacheMaxLen = 256;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(path + ": " + (where.empty() ? "" : where + ": ") + what);
  }
  [[noreturn]] void unsupported(const std::string& type, const std::string& where, const std::string& known) const {
    throw Error(path + ": tokenizer.json component '" + type + "' is not supported (" + where + "; mnemo reads " +
                known + ")");
  }
  const json& field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object, got " + json_excerpt(obj));
    auto it = obj.find(key);
    if (it == obj.end()) fail(where, std::string("field '") + key + "' is missing");
    return *it;
  }
  std::string str(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_string()) fail(where + "." + key, "expected a string, got " + json_excerpt(v));
    return v.get<std::string>();
  }
  bool flag(const json& obj, const char* key, const std::string& where, bool dflt) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) fail(where + "." + key, "expected true or false, got " + json_excerpt(*it));
    return it->get<bool>();
  }
  std::string type_of(const json& obj, const std::string& where) const { return str(obj, "type", where); }

  void load(const json& doc);
  void load_model(const json& model);
  void load_normalizer(const json& n, const std::string& where);
  void load_pre_tokenizer(const json& p, const std::string& where);
  void load_decoder(const json& d, const std::string& where);
  void load_post_processor(const json& p, const std::string& where);
  void load_added_tokens(const json& list);
  void pick_specials(const fs::path& folder);

  std::string normalize(std::string_view text) const;
  void encode_segment(std::string_view text, bool at_start, std::vector<int64_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& ids) const;
};

}  // namespace mnemo
