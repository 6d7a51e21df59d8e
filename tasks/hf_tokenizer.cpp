// Hugging Face tokenizer.json reader and BPE encoder (see hf_tokenizer.h for what is read).
#include "tasks/hf_tokenizer.h"

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

namespace mnemo {

namespace fs = std::filesystem;

namespace {

// Ids are indices into a table: real vocabularies stay below 300 000; a file claiming more is refused rather
// than allocating a table for it.
constexpr int64_t kMaxTokenId = (1 << 22) - 1;

// ---- UTF-8 helpers ----

// Length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), else the
// length of its longest valid prefix as a negative number (-1 for a byte no sequence starts with). The
// negative form gives the "maximal subpart" that one U+FFFD replaces (Unicode 15, section 3.9; Rust's
// String::from_utf8_lossy, which the reference library's decoders use, does the same).
int utf8_step(std::string_view s, size_t i) {
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

bool valid_utf8(std::string_view s) {
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
std::string utf8_lossy(std::string_view s) {
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
char32_t next_codepoint(std::string_view s, size_t& i) {
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

char32_t prev_codepoint(std::string_view s, size_t& i) {  // the character ending at s[i-1]; moves i to its start
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  const char32_t cp = next_codepoint(s, k);
  i = j;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
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
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void replace_every(std::string& s, const std::string& from, const std::string& to) {
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

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// The token's bytes when every character is in the byte table; false otherwise.
bool byte_level_bytes(std::string_view token, std::string& out) {
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

MatchScratch& scratch() {
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

std::string regex_quote(const std::string& literal) {
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

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

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
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::deque<AddedToken> added;
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  TokenMatcher raw_matcher, normalized_matcher;
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

void HfTokenizer::Impl::load(const json& doc) {
  if (!doc.is_object()) fail("", "expected a JSON object at the top level, got " + json_excerpt(doc));
  if (!doc.contains("model")) fail("", "field 'model' is missing (not a tokenizer.json file?)");
  load_model(doc["model"]);
  if (doc.contains("normalizer") && !doc["normalizer"].is_null()) load_normalizer(doc["normalizer"], "normalizer");
  if (doc.contains("pre_tokenizer") && !doc["pre_tokenizer"].is_null())
    load_pre_tokenizer(doc["pre_tokenizer"], "pre_tokenizer");
  for (size_t i = 0; i < pre_tokenizers.size(); ++i)
    if (pre_tokenizers[i].kind == PreTokenizer::kByteLevel) {
      if (i + 1 != pre_tokenizers.size())
        fail("pre_tokenizer", "a ByteLevel pre-tokenizer must come last (it maps bytes to the GPT-2 alphabet)");
      byte_level = true;
    }
  if (doc.contains("decoder") && !doc["decoder"].is_null()) {
    has_decoder = true;
    load_decoder(doc["decoder"], "decoder");
  }
  if (doc.contains("post_processor") && !doc["post_processor"].is_null())
    load_post_processor(doc["post_processor"], "post_processor");
  if (doc.contains("added_tokens") && !doc["added_tokens"].is_null()) load_added_tokens(doc["added_tokens"]);

  // Byte-level models start from the 256 byte characters; `bytes_vocab` lets ignore_merges look words up by bytes.
  byte_unit.fill(-1);
  if (byte_level) {
    for (int b = 0; b < 256; ++b) {
      auto it = vocab.find(byte_table().byte_to_char[b]);
      if (it != vocab.end()) byte_unit[b] = it->second;
    }
    std::string bytes;
    for (const auto& [tok, tid] : vocab)
      if (byte_level_bytes(tok, bytes)) bytes_vocab.emplace(bytes, tid);
  }
}

void HfTokenizer::Impl::load_model(const json& model) {
  const std::string where = "model";
  if (!model.is_object()) fail(where, "expected an object, got " + json_excerpt(model));
  std::string type = model.contains("type") ? type_of(model, where) : (model.contains("merges") ? "BPE" : "");
  if (type != "BPE") unsupported(type.empty() ? "(no type)" : type, "model.type", "BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      fail(std::string("model.") + key, "is not supported (only null or \"\"), got " + json_excerpt(model[key]));
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    fail("model.dropout", "BPE dropout is not supported (only null): encoding must be deterministic");
  byte_fallback = flag(model, "byte_fallback", where, false);
  fuse_unk = flag(model, "fuse_unk", where, false);
  ignore_merges = flag(model, "ignore_merges", where, false);

  const json& v = field(model, "vocab", where);
  if (!v.is_object()) fail("model.vocab", "expected an object {token: id}, got " + json_excerpt(v));
  int32_t max_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > kMaxTokenId)
      fail("model.vocab." + it.key(),
           "expected an id in [0, " + std::to_string(kMaxTokenId) + "], got " + json_excerpt(it.value()));
    const auto tid = it.value().get<int32_t>();
    vocab.emplace(it.key(), tid);
    max_id = std::max(max_id, tid);
  }
  id_to_token.assign(max_id + 1, std::string());
  for (const auto& [tok, tid] : vocab) id_to_token[tid] = tok;

  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = str(model, "unk_token", where);
    auto it = vocab.find(unk);
    if (it == vocab.end()) fail("model.unk_token", json(unk).dump() + " is not in model.vocab");
    unk_id = it->second;
  }
  byte_fallback_id.fill(-1);
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = vocab.find(name);
      if (it != vocab.end()) byte_fallback_id[b] = it->second;
    }
  }

  const json& m = field(model, "merges", where);
  if (!m.is_array()) fail("model.merges", "expected a list, got " + json_excerpt(m));
  merges.reserve(m.size() * 2);
  for (size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    const std::string at = "model.merges[" + std::to_string(i) + "]";
    std::string a, b;
    if (e.is_string()) {  // "a b" (older files)
      const std::string& s = e.get_ref<const json::string_t&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail(at, "expected \"a b\" (two tokens, one space), got " + json_excerpt(e));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(at, "expected \"a b\" or [\"a\", \"b\"], got " + json_excerpt(e));
    }
    auto ia = vocab.find(a), ib = vocab.find(b), ic = vocab.find(a + b);
    if (ia == vocab.end()) fail(at, json(a).dump() + " is not in model.vocab");
    if (ib == vocab.end()) fail(at, json(b).dump() + " is not in model.vocab");
    if (ic == vocab.end()) fail(at, "the merged token " + json(a + b).dump() + " is not in model.vocab");
    merges[pair_key(ia->second, ib->second)] = Merge{static_cast<int32_t>(i), ic->second};
  }
}

void HfTokenizer::Impl::load_normalizer(const json& n, const std::string& where) {
  const std::string type = type_of(n, where);
  if (type == "Sequence") {
    const json& list = field(n, "normalizers", where);
    if (!list.is_array()) fail(where + ".normalizers", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "NFC") {
    normalizers.push_back({Normalizer::kNfc, "", ""});
  } else if (type == "NFKC") {
    normalizers.push_back({Normalizer::kNfkc, "", ""});
  } else if (type == "Prepend") {
    normalizers.push_back({Normalizer::kPrepend, str(n, "prepend", where), ""});
  } else if (type == "Replace") {
    const json& pat = field(n, "pattern", where);
    if (!pat.is_object() || !pat.contains("String") || !pat["String"].is_string())
      fail(where + ".pattern", "only a {\"String\": ...} pattern is supported, got " + json_excerpt(pat));
    normalizers.push_back({Normalizer::kReplace, pat["String"].get<std::string>(), str(n, "content", where)});
  } else {
    unsupported(type, where, "normalizers NFC, NFKC, Prepend, Replace, Sequence");
  }
}

void HfTokenizer::Impl::load_pre_tokenizer(const json& p, const std::string& where) {
  const std::string type = type_of(p, where);
  PreTokenizer t;
  if (type == "Sequence") {
    const json& list = field(p, "pretokenizers", where);
    if (!list.is_array()) fail(where + ".pretokenizers", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  } else if (type == "ByteLevel") {
    t.kind = PreTokenizer::kByteLevel;
    t.add_prefix_space = flag(p, "add_prefix_space", where, true);
    if (flag(p, "use_regex", where, true)) t.regex = std::make_shared<Regex>(kGpt2Pattern, path + ": " + where);
  } else if (type == "Split") {
    t.kind = PreTokenizer::kSplit;
    const json& pat = field(p, "pattern", where);
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string())
      t.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>(), path + ": " + where + ".pattern");
    else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
      t.regex = std::make_shared<Regex>(regex_quote(pat["String"].get<std::string>()),
                                        path + ": " + where + ".pattern");
    else
      fail(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got " + json_excerpt(pat));
    const std::string behavior = str(p, "behavior", where);
    if (behavior == "Removed")
      t.remove_matches = true;
    else if (behavior != "Isolated")
      unsupported("Split(behavior=" + behavior + ")", where + ".behavior", "Split behaviors Isolated, Removed");
    t.invert = flag(p, "invert", where, false);
  } else if (type == "Metaspace") {
    t.kind = PreTokenizer::kMetaspace;
    t.replacement = str(p, "replacement", where);
    if (t.replacement.empty()) fail(where + ".replacement", "is empty");
    t.split = flag(p, "split", where, true);
    std::string scheme = "always";
    if (p.contains("prepend_scheme")) scheme = str(p, "prepend_scheme", where);
    else if (p.contains("add_prefix_space")) scheme = flag(p, "add_prefix_space", where, true) ? "always" : "never";
    if (scheme == "always") t.prepend = PreTokenizer::kAlways;
    else if (scheme == "first") t.prepend = PreTokenizer::kFirst;
    else if (scheme == "never") t.prepend = PreTokenizer::kNever;
    else fail(where + ".prepend_scheme", "expected always, first or never, got " + json(scheme).dump());
  } else {
    unsupported(type, where, "pre-tokenizers ByteLevel, Split, Metaspace, Sequence");
  }
  pre_tokenizers.push_back(std::move(t));
}

void HfTokenizer::Impl::load_decoder(const json& d, const std::string& where) {
  const std::string type = type_of(d, where);
  Decoder t;
  if (type == "Sequence") {
    const json& list = field(d, "decoders", where);
    if (!list.is_array()) fail(where + ".decoders", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i) load_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  } else if (type == "ByteLevel") {
    t.kind = Decoder::kByteLevel;
  } else if (type == "Replace") {
    t.kind = Decoder::kReplace;
    const json& pat = field(d, "pattern", where);
    if (!pat.is_object() || !pat.contains("String") || !pat["String"].is_string())
      fail(where + ".pattern", "only a {\"String\": ...} pattern is supported, got " + json_excerpt(pat));
    t.a = pat["String"].get<std::string>();
    t.b = str(d, "content", where);
  } else if (type == "ByteFallback") {
    t.kind = Decoder::kByteFallback;
  } else if (type == "Fuse") {
    t.kind = Decoder::kFuse;
  } else if (type == "Strip") {
    t.kind = Decoder::kStrip;
    t.a = str(d, "content", where);
    size_t i = 0;
    if (t.a.empty() || !valid_utf8(t.a) || (next_codepoint(t.a, i), i != t.a.size()))
      fail(where + ".content", "expected one character, got " + json(t.a).dump());
    for (const char* key : {"start", "stop"}) {
      const json& n = field(d, key, where);
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1000000)
        fail(where + "." + key, "expected a count, got " + json_excerpt(n));
      (std::string(key) == "start" ? t.start : t.stop) = n.get<int>();
    }
  } else if (type == "Metaspace") {
    t.kind = Decoder::kMetaspace;
    t.a = str(d, "replacement", where);
    std::string scheme = d.contains("prepend_scheme") ? str(d, "prepend_scheme", where) : "always";
    if (!d.contains("prepend_scheme") && d.contains("add_prefix_space"))
      scheme = flag(d, "add_prefix_space", where, true) ? "always" : "never";
    t.prepend = scheme != "never";
  } else {
    unsupported(type, where, "decoders ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
  }
  decoders.push_back(std::move(t));
}

void HfTokenizer::Impl::load_post_processor(const json& p, const std::string& where) {
  const std::string type = type_of(p, where);
  if (type == "Sequence") {
    const json& list = field(p, "processors", where);
    if (!list.is_array()) fail(where + ".processors", "expected a list, got " + json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i)
      load_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
  } else if (type == "TemplateProcessing") {
    // BOS = the special token placed before the sequence in the single-sequence template.
    const json& single = field(p, "single", where);
    if (!single.is_array() || single.empty()) fail(where + ".single", "expected a non-empty list");
    const json& first = single[0];
    if (first.is_object() && first.contains("SpecialToken")) {
      const std::string name = str(first["SpecialToken"], "id", where + ".single[0].SpecialToken");
      const json& specials = field(p, "special_tokens", where);
      if (!specials.is_object() || !specials.contains(name))
        fail(where + ".special_tokens", json(name).dump() + " is not listed");
      const json& ids = field(specials[name], "ids", where + ".special_tokens." + name);
      if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer())
        fail(where + ".special_tokens." + name + ".ids", "expected one id, got " + json_excerpt(ids));
      bos = ids[0].get<int64_t>();
    }
  } else if (type != "ByteLevel") {
    unsupported(type, where, "post-processors ByteLevel, TemplateProcessing, Sequence");
  }
}

void HfTokenizer::Impl::load_added_tokens(const json& list) {
  if (!list.is_array()) fail("added_tokens", "expected a list, got " + json_excerpt(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    const json& tid = field(t, "id", where);
    if (!tid.is_number_integer() || tid.get<int64_t>() < 0 || tid.get<int64_t>() > kMaxTokenId)
      fail(where + ".id", "expected an id in [0, " + std::to_string(kMaxTokenId) + "], got " + json_excerpt(tid));
    if (flag(t, "single_word", where, false)) fail(where + ".single_word", "true is not supported");
    AddedToken a{str(t, "content", where), tid.get<int32_t>(), flag(t, "special", where, false),
                 flag(t, "normalized", where, false), flag(t, "lstrip", where, false), flag(t, "rstrip", where, false)};
    if (a.content.empty()) fail(where + ".content", "is empty");
    if (!valid_utf8(a.content)) fail(where + ".content", "is not valid UTF-8");
    added.push_back(a);
    const AddedToken* p = &added.back();
    added_by_id[a.id] = p;
    // With no normalizer, "normalized" tokens are matched on the same text as the others.
    (a.normalized && !normalizers.empty() ? normalized_matcher : raw_matcher).add(p);
    if (static_cast<size_t>(a.id) >= id_to_token.size()) id_to_token.resize(a.id + 1);
    id_to_token[a.id] = a.content;
  }
  raw_matcher.finish();
  normalized_matcher.finish();
}

void HfTokenizer::Impl::pick_specials(const fs::path& folder) {
  vocab_n = static_cast<int64_t>(id_to_token.size());
  auto lookup = [&](const std::string& name) -> int64_t {
    for (const auto& a : added)
      if (a.content == name) return a.id;
    auto it = vocab.find(name);
    return it == vocab.end() ? -1 : it->second;
  };
  const fs::path config = folder / "tokenizer_config.json";
  json cfg;
  if (fs::exists(config)) cfg = read_json_file(config.string());
  auto from_config = [&](const char* key) -> int64_t {
    if (!cfg.is_object() || !cfg.contains(key)) return -1;
    const json& v = cfg[key];
    std::string name;
    if (v.is_string()) name = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) name = v["content"].get<std::string>();
    else return -1;
    return lookup(name);
  };
  eos = from_config("eos_token");
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
    if (eos < 0) eos = lookup(name);
  pad = from_config("pad_token");
  if (pad < 0) pad = lookup("<pad>");
}

std::string HfTokenizer::Impl::normalize(std::string_view text) const {
  std::string s(text);
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::kNfc:
      case Normalizer::kNfkc: {
        if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) break;
        utf8proc_uint8_t* out = nullptr;
        const int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (n.kind == Normalizer::kNfkc ? UTF8PROC_COMPAT : 0);
        const utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                                  static_cast<utf8proc_ssize_t>(s.size()), &out,
                                                  static_cast<utf8proc_option_t>(options));
        if (len < 0) throw Error(path + ": normalizer: " + utf8proc_errmsg(len));
        s.assign(reinterpret_cast<char*>(out), static_cast<size_t>(len));
        std::free(out);
        break;
      }
      case Normalizer::kPrepend:
        if (!s.empty()) s.insert(0, n.a);
        break;
      case Normalizer::kReplace:
        replace_every(s, n.a, n.b);
        break;
    }
  }
  return s;
}

// One stretch of text between added tokens: normalize, match normalized added tokens, pre-tokenize, BPE.
void HfTokenizer::Impl::encode_segment(std::string_view text, bool at_start, std::vector<int64_t>& out) const {
  std::string normalized;
  if (!normalizers.empty()) {
    normalized = normalize(text);
    text = normalized;
  }
  std::deque<std::string> store;  // text rewritten by Metaspace (stable addresses for the views)
  std::vector<Piece> pieces, next;
  auto run = [&](std::string_view seg, bool start) {
    pieces.assign(1, Piece{seg, start});
    for (const PreTokenizer& p : pre_tokenizers) {
      next.clear();
      for (const Piece& piece : pieces) {
        switch (p.kind) {
          case PreTokenizer::kByteLevel: {
            std::string_view t = piece.text;
            if (p.add_prefix_space && !t.empty() && t[0] != ' ') {
              store.push_back(" " + std::string(t));
              t = store.back();
            }
            if (!p.regex) {
              next.push_back({t, piece.at_start});
              break;
            }
            size_t prev = 0;
            p.regex->for_each_match(t, [&](size_t b, size_t e) {
              if (b > prev) next.push_back({t.substr(prev, b - prev), piece.at_start && prev == 0});
              next.push_back({t.substr(b, e - b), piece.at_start && b == 0});
              prev = e;
            });
            if (prev < t.size()) next.push_back({t.substr(prev), piece.at_start && prev == 0});
            break;
          }
          case PreTokenizer::kSplit: {
            std::string_view t = piece.text;
            size_t prev = 0;
            // keep(match?) under invert: Removed drops what the (possibly inverted) pattern marks.
            auto emit = [&](size_t b, size_t e, bool is_match) {
              if (p.invert) is_match = !is_match;
              if (p.remove_matches && is_match) return;
              next.push_back({t.substr(b, e - b), piece.at_start && b == 0});
            };
            p.regex->for_each_match(t, [&](size_t b, size_t e) {
              if (b > prev) emit(prev, b, false);
              emit(b, e, true);
              prev = e;
            });
            if (prev < t.size()) emit(prev, t.size(), false);
            break;
          }
          case PreTokenizer::kMetaspace: {
            std::string s(piece.text);
            replace_every(s, " ", p.replacement);
            const bool prepend =
                p.prepend == PreTokenizer::kAlways || (p.prepend == PreTokenizer::kFirst && piece.at_start);
            if (prepend && s.compare(0, p.replacement.size(), p.replacement) != 0) s.insert(0, p.replacement);
            store.push_back(std::move(s));
            std::string_view t = store.back();
            if (!p.split) {
              next.push_back({t, piece.at_start});
              break;
            }
            // split before every replacement character (MergedWithNext)
            size_t b = 0;
            for (size_t hit = t.find(p.replacement, 1); hit != std::string_view::npos;
                 hit = t.find(p.replacement, hit + p.replacement.size())) {
              next.push_back({t.substr(b, hit - b), piece.at_start && b == 0});
              b = hit;
            }
            next.push_back({t.substr(b), piece.at_start && b == 0});
            break;
          }
        }
      }
      pieces.swap(next);
    }
    for (const Piece& piece : pieces)
      if (!piece.text.empty()) encode_piece(piece.text, out);
  };
  if (normalized_matcher.empty()) {
    run(text, at_start);
  } else {
    normalized_matcher.split(text, [&](std::string_view seg, int32_t tid, size_t offset) {
      if (tid >= 0) out.push_back(tid);
      else run(seg, at_start && offset == 0);
    });
  }
}

void HfTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  const bool cacheable = piece.size() <= kCacheMaxLen;
  if (cacheable) {
    std::shared_lock<std::shared_mutex> lock(cache_mutex);
    auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  bpe(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock<std::shared_mutex> lock(cache_mutex, std::try_to_lock);
    if (lock.owns_lock() && cache.size() < kCacheEntries) cache.emplace(std::string(piece), ids);
  }
}

// BPE over one pre-token (the library's Word::merge_all): start from its units (bytes of a byte-level model,
// else characters, with <0xNN> byte fallback or <unk>), then repeatedly merge the adjacent pair of lowest rank,
// the leftmost one on ties, until no pair has a merge.
void HfTokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges) {  // a word that is itself a token is that token
    const auto& table = byte_level ? bytes_vocab : vocab;
    auto it = table.find(std::string(word));
    if (it != table.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  thread_local std::vector<Symbol> sym;
  sym.clear();
  thread_local std::string key;
  int32_t pending_unk = -1;  // fuse_unk: consecutive unknown units become one <unk>
  auto push = [&](int32_t tid) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({tid, n - 1, n + 1, true});
  };
  auto unknown = [&](std::string_view unit) {
    if (byte_fallback) {
      bool all = true;
      for (char c : unit) all = all && byte_fallback_id[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : unit) push(byte_fallback_id[static_cast<unsigned char>(c)]);
        return;
      }
    }
    if (unk_id < 0) return;  // no <unk>: the unit is dropped, as the library does
    if (pending_unk >= 0 && fuse_unk) return;
    if (pending_unk >= 0) push(pending_unk);
    pending_unk = unk_id;
  };
  auto known = [&](int32_t tid) {
    if (pending_unk >= 0) {
      push(pending_unk);
      pending_unk = -1;
    }
    push(tid);
  };
  if (byte_level) {
    for (size_t i = 0; i < word.size(); ++i) {
      const int32_t tid = byte_unit[static_cast<unsigned char>(word[i])];
      if (tid >= 0) known(tid);
      else unknown(word.substr(i, 1));
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      const int n = utf8_step(word, i);
      const size_t len = n > 0 ? n : 1;
      key.assign(word.data() + i, len);
      auto it = vocab.find(key);
      if (it != vocab.end()) known(it->second);
      else unknown(word.substr(i, len));
      i += len;
    }
  }
  if (pending_unk >= 0) push(pending_unk);
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
  };
  thread_local std::vector<Candidate> heap;
  heap.clear();
  auto consider = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merges.end()) {
      heap.push_back({it->second.rank, pos, it->second.id});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(sym.size()); ++p) consider(p);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    Symbol& right = sym[s.next];
    auto it = merges.find(pair_key(s.id, right.id));
    if (it == merges.end() || it->second.id != top.new_id) continue;  // a stale entry
    s.id = top.new_id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (const Symbol& s : sym)
    if (s.alive) ids.push_back(s.id);
}

HfTokenizer::HfTokenizer(const std::string& path_in) : impl_(std::make_unique<Impl>()) {
  fs::path path = path_in;
  if (fs::is_directory(path)) {
    path /= "tokenizer.json";
    if (!fs::exists(path)) throw Error(path_in + ": the folder holds no tokenizer.json");
  }
  impl_->path = path.string();
  const std::string text = read_text_file(impl_->path);
  impl_->load(parse_json_text(text, impl_->path));
  impl_->pick_specials(path.parent_path());
  const std::string name = path.filename() == "tokenizer.json" && !path.parent_path().filename().empty()
                               ? (path.parent_path().filename() / path.filename()).string()
                               : path.filename().string();
  impl_->id = "hf:" + name + ":" + sha256_hex(text).substr(0, 12);
}

HfTokenizer::~HfTokenizer() = default;

std::vector<int64_t> HfTokenizer::encode(const std::string& text_in) const {
  const Impl& m = *impl_;
  std::string repaired;
  std::string_view text = text_in;
  if (!valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 4);
  if (m.raw_matcher.empty()) {
    if (!text.empty()) m.encode_segment(text, true, out);
  } else {
    m.raw_matcher.split(text, [&](std::string_view seg, int32_t tid, size_t offset) {
      if (tid >= 0) out.push_back(tid);
      else m.encode_segment(seg, offset == 0, out);
    });
  }
  return out;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t tid : ids) {
    if (tid < 0 || tid >= static_cast<int64_t>(m.id_to_token.size())) continue;
    auto a = m.added_by_id.find(static_cast<int32_t>(tid));
    if (a != m.added_by_id.end()) {
      if (!a->second->special) tokens.push_back(a->second->content);
      continue;
    }
    if (!m.id_to_token[tid].empty()) tokens.push_back(m.id_to_token[tid]);
  }
  if (!m.has_decoder) {  // the library joins tokens with spaces when a file names no decoder
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return utf8_lossy(out);
  }
  std::string bytes;
  for (const Decoder& d : m.decoders) {
    switch (d.kind) {
      case Decoder::kByteLevel: {  // all tokens -> bytes -> one string (lossy)
        std::string all;
        for (const auto& t : tokens) {
          if (byte_level_bytes(t, bytes)) all += bytes;
          else all += t;
        }
        tokens.assign(1, utf8_lossy(all));
        break;
      }
      case Decoder::kReplace:
        for (auto& t : tokens) replace_every(t, d.a, d.b);
        break;
      case Decoder::kByteFallback: {  // runs of <0xNN> -> their bytes if valid UTF-8, else one U+FFFD per byte
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        auto flush = [&] {
          if (run_len == 0) return;
          if (valid_utf8(run)) {
            out.push_back(run);
          } else {
            std::string r;
            for (size_t k = 0; k < run_len; ++k) r += "\xEF\xBF\xBD";
            out.push_back(r);
          }
          run.clear();
          run_len = 0;
        };
        for (auto& t : tokens) {
          const bool byte_token = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                                  std::isxdigit(static_cast<unsigned char>(t[3])) &&
                                  std::isxdigit(static_cast<unsigned char>(t[4]));
          if (byte_token) {
            run += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
            ++run_len;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
      case Decoder::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Decoder::kStrip:
        for (auto& t : tokens) {
          for (int k = 0; k < d.start && t.compare(0, d.a.size(), d.a) == 0; ++k) t.erase(0, d.a.size());
          for (int k = 0; k < d.stop && t.size() >= d.a.size() &&
                          t.compare(t.size() - d.a.size(), d.a.size(), d.a) == 0;
               ++k)
            t.erase(t.size() - d.a.size());
        }
        break;
      case Decoder::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_every(tokens[i], d.a, " ");
          if (i == 0 && d.prepend && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return utf8_lossy(out);
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_n; }
int64_t HfTokenizer::bos_id() const { return impl_->bos; }
int64_t HfTokenizer::eos_id() const { return impl_->eos; }
int64_t HfTokenizer::pad_id() const { return impl_->pad >= 0 ? impl_->pad : Tokenizer::pad_id(); }
std::string HfTokenizer::id() const { return impl_->id; }
const std::string& HfTokenizer::path() const { return impl_->path; }

std::string HfTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->id_to_token.size())) return "";
  return impl_->id_to_token[id];
}

int64_t HfTokenizer::token_to_id(const std::string& token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

bool is_hf_tokenizer_path(const std::string& path) {
  const fs::path p = path;
  if (fs::is_directory(p)) return fs::exists(p / "tokenizer.json");
  return p.extension() == ".json";
}

}  // namespace mnemo
