// Text helpers shared by the text tasks (S-NIAH, BABILong): a portable seeded PRNG, whitespace
// collapsing, a Punkt-style sentence splitter, word lists, and distractor corpora (Project
// Gutenberg header/footer stripping, CRLF handling).
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"

namespace mnemo {

// std::mt19937_64 seeded through splitmix64 (docs/tasks.md#evaluation-machinery) with portable draws (rejection
// sampling, not the implementation-defined std distributions).
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed);
  uint64_t next() { return gen_(); }
  uint64_t below(uint64_t n);                 // uniform in [0, n); n > 0
  int64_t between(int64_t lo, int64_t hi);    // uniform in [lo, hi], inclusive
  double uniform();                           // [0, 1), 53 bits

 private:
  std::mt19937_64 gen_;
};

// Per-sample seed (docs/tasks.md#evaluation-machinery: seed + sample index); the train split draws from a disjoint range
// (offset 2^40) so train and test samples never coincide.
uint64_t sample_seed(uint64_t seed, int64_t index, bool train_split);

// Python re.sub(r"\s+", " ", s) over ASCII whitespace.
std::string collapse_whitespace(const std::string& s);
// Split on single spaces (Python s.split(" ")): empty strings kept between double spaces.
std::vector<std::string> split_on_spaces(const std::string& s);
std::string join(const std::vector<std::string>& parts, const std::string& sep, size_t begin = 0,
                 size_t end = std::string::npos);

// Sentence splitter in the spirit of NLTK Punkt (RULER and BABILong use Punkt): a sentence ends
// at ".", "?" or "!" (plus closing quotes/brackets) followed by whitespace, except after common
// abbreviations and single-letter initials, or when the next word starts in lower case.
// Sentences are returned stripped; whitespace inside a sentence is kept as is.
std::vector<std::string> split_sentences(const std::string& text);

// A word list file (one word per line): trimmed, blank lines dropped, de-duplicated and sorted.
std::vector<std::string> read_word_list(const std::string& path);

// Project Gutenberg plain text: byte range [begin, end) strictly between the "*** START OF
// THE/THIS PROJECT GUTENBERG EBOOK ... ***" line (which may wrap) and the "*** END OF ..." line,
// as corpus/gutenberg/MANIFEST.md defines it. std::nullopt-like {0, 0} if no markers.
std::pair<size_t, size_t> gutenberg_body_range(const std::string& text);
// Body text of a Gutenberg file: the marker-delimited body with a leading "Produced by ..." /
// "E-text prepared by ..." credit paragraph and a trailing "End of (the) Project Gutenberg ..."
// line removed, CRLF -> LF, BOM removed. Text without the markers is returned whole (CRLF -> LF).
std::string gutenberg_body(const std::string& raw);

// A distractor-text corpus: a directory of .txt files, one .txt file, or a .json file with a
// "text" field (e.g. haystack/PaulGrahamEssays.json). Documents are loaded lazily and cached;
// Gutenberg files are stripped of their licence header/footer (gutenberg_body), text is made
// valid UTF-8.
class TextCorpus {
 public:
  // spec: absolute path, or a path relative to the working directory or the data directory.
  static std::shared_ptr<const TextCorpus> open(const std::string& spec);
  size_t size() const { return files_.size(); }
  const std::string& document(size_t i) const;  // cached after the first load
  const std::vector<std::string>& files() const { return files_; }
  // Short label recorded with results: the folder or file name (e.g. "gutenberg").
  const std::string& label() const { return label_; }
  // SHA-256 over the file names and sizes (cheap identity of the corpus for result rows).
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  TextCorpus() = default;
  std::vector<std::string> files_;
  std::string label_, fingerprint_;
  mutable std::vector<std::shared_ptr<const std::string>> docs_;
};

// Resolve a user path: as given if it exists, else relative to the data directory (Error naming
// both when neither exists).
std::string resolve_data_file(const std::string& spec, const std::string& what);

}  // namespace mnemo
