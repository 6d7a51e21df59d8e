#include "tasks/text_utils.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tasks/scoring.h"
#include "tasks/tokenizer.h"

namespace mnemo {

namespace fs = std::filesystem;

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

bool is_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d); }
bool is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string crlf_to_lf(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) out.push_back(s[i]);
  return out;
}
}  // namespace

SampleRng::SampleRng(uint64_t seed) : gen_(splitmix64(seed)) {}

uint64_t SampleRng::below(uint64_t n) {
  if (n == 0) throw Error("SampleRng::below(0)");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t x;
  do x = gen_();
  while (x >= limit);
  return x % n;
}

int64_t SampleRng::between(int64_t lo, int64_t hi) {
  if (hi < lo) throw Error("SampleRng::between: empty range");
  return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
}

double SampleRng::uniform() { return static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0); }

uint64_t sample_seed(uint64_t seed, int64_t index, bool train_split) {
  return seed + static_cast<uint64_t>(index) + (train_split ? (1ULL << 40) : 0ULL);
}

std::string collapse_whitespace(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool in_space = false;
  for (char c : s) {
    if (is_space(static_cast<unsigned char>(c))) {
      in_space = true;
    } else {
      if (in_space) out.push_back(' ');
      in_space = false;
      out.push_back(c);
    }
  }
  if (in_space) out.push_back(' ');
  return out;
}

std::vector<std::string> split_on_spaces(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const auto p = s.find(' ', start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep, size_t begin, size_t end) {
  end = std::min(end, parts.size());
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split_sentences(const std::string& text) {
  static const std::unordered_set<std::string> abbreviations = {
      "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "hon", "gen", "col", "capt", "lt", "sgt", "maj",
      "gov", "sen", "rep", "messrs", "mme", "mlle", "vs", "etc", "e.g", "i.e", "viz", "cf", "al", "no", "nos",
      "vol", "vols", "ch", "chap", "pp", "fig", "ed", "eds", "co", "corp", "inc", "ltd", "bros", "mt", "ft", "esq",
      "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "a.m", "p.m"};
  std::vector<std::string> out;
  const size_t n = text.size();
  size_t start = 0;
  auto emit = [&](size_t end) {
    std::string s = strip(text.substr(start, end - start));
    if (!s.empty()) out.push_back(std::move(s));
    start = end;
  };
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c != '.' && c != '?' && c != '!') continue;
    // Extend over repeated terminators and closing quotes/brackets (ASCII and UTF-8 ’ ” »).
    size_t j = i + 1;
    while (j < n) {
      const char d = text[j];
      if (d == '.' || d == '?' || d == '!' || d == '"' || d == '\'' || d == ')' || d == ']') {
        ++j;
      } else if (text.compare(j, 3, "\xE2\x80\x99") == 0 || text.compare(j, 3, "\xE2\x80\x9D") == 0) {
        j += 3;
      } else if (text.compare(j, 2, "\xC2\xBB") == 0) {
        j += 2;
      } else {
        break;
      }
    }
    if (j < n && !is_space(static_cast<unsigned char>(text[j]))) {
      i = j - 1;
      continue;
    }
    size_t k = j;  // next non-space character
    while (k < n && is_space(static_cast<unsigned char>(text[k]))) ++k;
    if (c == '.') {
      size_t w = i;  // the word ending at the period
      while (w > start && !is_space(static_cast<unsigned char>(text[w - 1]))) --w;
      std::string word = text.substr(w, i - w);
      while (!word.empty() && !is_alpha(static_cast<unsigned char>(word.front()))) word.erase(0, 1);
      const std::string lw = ascii_lower(word);
      const bool initial = word.size() == 1 && is_alpha(static_cast<unsigned char>(word[0]));
      const bool next_lower = k < n && is_lower(static_cast<unsigned char>(text[k]));
      if (abbreviations.count(lw) || initial || next_lower) {
        i = j - 1;
        continue;
      }
    }
    emit(j);
    i = j - 1;
  }
  if (start < n) emit(n);
  return out;
}

std::vector<std::string> read_word_list(const std::string& path) {
  const std::string text = read_text_file(path);
  std::set<std::string> words;
  size_t start = 0;
  while (start <= text.size()) {
    auto p = text.find('\n', start);
    if (p == std::string::npos) p = text.size();
    std::string w = strip(text.substr(start, p - start));
    if (!w.empty()) words.insert(w);
    start = p + 1;
  }
  if (words.empty()) throw Error("word list '" + path + "' is empty");
  return {words.begin(), words.end()};
}

std::pair<size_t, size_t> gutenberg_body_range(const std::string& text) {
  auto find_marker = [&](const std::string& what) -> size_t {
    // "***" + optional spaces + "START OF THE/THIS PROJECT GUTENBERG EBOOK"
    size_t from = 0;
    while (true) {
      const auto p = text.find(what, from);
      if (p == std::string::npos) return std::string::npos;
      size_t q = p;
      while (q > 0 && text[q - 1] == ' ') --q;
      if (q >= 3 && text.compare(q - 3, 3, "***") == 0) return q - 3;
      from = p + 1;
    }
  };
  const size_t start = find_marker("START OF TH");
  const size_t end_marker = find_marker("END OF TH");
  if (start == std::string::npos || end_marker == std::string::npos || end_marker < start) return {0, 0};
  // The START marker closes with "***" (possibly on the next line); the body begins after its '\n'.
  const auto close = text.find("***", start + 3);
  if (close == std::string::npos || close > end_marker) return {0, 0};
  const auto nl = text.find('\n', close);
  if (nl == std::string::npos) return {0, 0};
  const size_t begin = nl + 1;
  const auto prev_nl = text.rfind('\n', end_marker == 0 ? 0 : end_marker - 1);
  const size_t end = prev_nl == std::string::npos ? 0 : prev_nl + 1;
  if (end < begin) return {0, 0};
  return {begin, end};
}

std::string gutenberg_body(const std::string& raw) {
  std::string text = raw;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  const auto [b, e] = gutenberg_body_range(text);
  if (e == 0) return crlf_to_lf(text);
  std::string body = crlf_to_lf(text.substr(b, e - b));
  // Leading producer credit: drop its paragraph if it starts within the first 1,500 bytes.
  for (const char* credit : {"Produced by", "E-text prepared by", "This etext was produced by"}) {
    const auto p = body.find(credit);
    if (p != std::string::npos && p < 1500 && strip(body.substr(0, p)).empty()) {
      const auto para_end = body.find("\n\n", p);
      body.erase(0, para_end == std::string::npos ? body.size() : para_end + 2);
      break;
    }
  }
  // Trailing "End of (the) Project Gutenberg ..." line(s).
  const std::string tail = ascii_lower(body.substr(body.size() > 400 ? body.size() - 400 : 0));
  for (const char* end_line : {"end of the project gutenberg", "end of project gutenberg"}) {
    const auto p = tail.rfind(end_line);
    if (p != std::string::npos) {
      const size_t abs = body.size() - tail.size() + p;
      const auto line_start = body.rfind('\n', abs);
      body.erase(line_start == std::string::npos ? 0 : line_start + 1);
      break;
    }
  }
  return body;
}

std::string resolve_data_file(const std::string& spec, const std::string& what) {
  if (spec.empty()) throw Error(what + ": empty path");
  if (fs::exists(spec)) return spec;
  const fs::path in_data = fs::path(data_dir()) / spec;
  if (fs::exists(in_data)) return in_data.string();
  throw Error(what + ": '" + spec + "' not found (also looked in " + in_data.string() + ")");
}

std::shared_ptr<const TextCorpus> TextCorpus::open(const std::string& spec) {
  const std::string path = resolve_data_file(spec, "corpus");
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const TextCorpus>> cache;
  const std::string key = fs::weakly_canonical(path).string();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  std::shared_ptr<TextCorpus> c(new TextCorpus());
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.is_regular_file() && entry.path().extension() == ".txt") c->files_.push_back(entry.path().string());
    std::sort(c->files_.begin(), c->files_.end());
    if (c->files_.empty()) throw Error("corpus '" + path + "' contains no .txt files");
  } else {
    c->files_.push_back(path);
  }
  fs::path label_path = fs::path(key);
  c->label_ = fs::is_directory(path) ? label_path.filename().string() : label_path.stem().string();
  std::string identity;
  for (const auto& f : c->files_)
    identity += fs::path(f).filename().string() + ":" + std::to_string(fs::file_size(f)) + "\n";
  c->fingerprint_ = sha256_hex(identity);
  c->docs_.resize(c->files_.size());
  cache.emplace(key, c);
  return c;
}

const std::string& TextCorpus::document(size_t i) const {
  if (i >= files_.size()) throw Error("corpus '" + label_ + "': document index out of range");
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!docs_[i]) {
    const std::string& f = files_[i];
    std::string text;
    if (fs::path(f).extension() == ".json") {
      const json j = read_json_file(f);
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
        throw Error("corpus file '" + f + "': expected a JSON object with a string field \"text\"");
      text = j["text"].get<std::string>();
    } else {
      text = gutenberg_body(read_text_file(f));
    }
    if (strip(text).empty()) throw Error("corpus file '" + f + "' has no text");
    docs_[i] = std::make_shared<const std::string>(sanitize_utf8(text));
  }
  return *docs_[i];
}

}  // namespace mnemo
