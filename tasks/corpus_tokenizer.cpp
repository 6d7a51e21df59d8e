// A SentencePiece tokenizer trained by mnemo on a corpus's training documents (tokenizer specs sp-bpe:N and
// sp-unigram:N), cached under <cache>/tokenizers/ by a key over the spec, the corpus settings and its files' hashes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/parse_int.h"
#include "core/progress.h"
#include "tasks/token_shard.h"

namespace mnemo {
namespace fs = std::filesystem;

bool is_corpus_tokenizer_spec(const std::string& spec) {
  return spec.rfind("sp-bpe:", 0) == 0 || spec.rfind("sp-unigram:", 0) == 0;
}

namespace {

// One line per paragraph of `text` (its lines joined by spaces), cut to at most kMaxLine bytes at a space or a
// UTF-8 character boundary.
void paragraph_lines(const std::string& text, const std::function<void(const std::string&)>& fn) {
  constexpr size_t kMaxLine = 4096;
  std::string para;
  auto flush = [&] {
    size_t a = para.find_first_not_of(" \t"), b = para.find_last_not_of(" \t");
    if (a == std::string::npos) {
      para.clear();
      return;
    }
    std::string s = para.substr(a, b - a + 1);
    para.clear();
    for (size_t pos = 0; pos < s.size();) {
      size_t end = std::min(s.size(), pos + kMaxLine);
      if (end < s.size()) {
        const size_t sp = s.rfind(' ', end);
        if (sp != std::string::npos && sp > pos) {
          end = sp;
        } else {
          while (end > pos + 1 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
        }
      }
      const std::string line = s.substr(pos, end - pos);
      if (line.find_first_not_of(' ') != std::string::npos) fn(line);
      pos = end;
      while (pos < s.size() && s[pos] == ' ') ++pos;
    }
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    std::string line = text.substr(pos, nl - pos);
    for (auto& c : line)
      if (c == '\r' || c == '\t' || c == '\f' || c == '\v') c = ' ';
    if (line.find_first_not_of(' ') == std::string::npos) {
      flush();
    } else {
      if (!para.empty()) para += ' ';
      para += line;
    }
    pos = nl + 1;
  }
  flush();
}

}  // namespace

std::string ensure_corpus_tokenizer(const CorpusSpec& corpus, const std::string& spec, const std::string& cache_dir,
                                    const std::function<void(const std::string&)>& log, int64_t max_sentences) {
  if (!is_corpus_tokenizer_spec(spec))
    throw Error("tokenizer spec '" + spec + "': expected sp-bpe:N or sp-unigram:N (N = vocabulary size)");
  const std::string type = spec.rfind("sp-bpe:", 0) == 0 ? "bpe" : "unigram";
  const auto n = parse_whole_int(spec.substr(spec.find(':') + 1));
  if (!n || *n < 8) throw Error("tokenizer spec '" + spec + "': the vocabulary size must be an integer >= 8");
  if (max_sentences <= 0) throw Error("tokenizer spec '" + spec + "': max_sentences must be > 0");
  if (cache_dir.empty()) throw Error("tokenizer spec '" + spec + "': empty cache directory");

  std::string key_text = spec + "\n" + corpus.to_json().dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  for (const auto& f : list_corpus_files(corpus)) key_text += f.sha256 + "\n";
  const std::string key = sha256_hex(key_text).substr(0, 16);
  const fs::path dir = fs::path(cache_dir) / "tokenizers";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("tokenizer " + spec + ": cannot create " + dir.string() + ": " + ec.message());
  const fs::path model = dir / (key + ".model");
  if (fs::exists(model, ec)) {
    try {
      SentencePieceTokenizer check(model.string());
      if (check.vocab_size() == *n) {
        if (log) log("tokenizer " + spec + ": reusing " + model.string());
        return model.string();
      }
      if (log) log("tokenizer " + spec + ": retraining " + model.string() + " (it has " +
                   std::to_string(check.vocab_size()) + " pieces)");
    } catch (const Error& e) {
      if (log) log("tokenizer " + spec + ": retraining " + model.string() + ": " + e.what());
    }
  }

  // Training text: pass 1 counts the paragraph lines, pass 2 writes an evenly spaced selection of them.
  const std::string pid = std::to_string(::getpid());
  const fs::path text_path = dir / (key + ".train." + pid + ".txt");
  const fs::path prefix = dir / (key + ".tmp." + pid);
  auto cleanup = [&] {
    std::error_code rec;
    for (const fs::path& p : {text_path, fs::path(prefix.string() + ".model"), fs::path(prefix.string() + ".vocab")})
      fs::remove(p, rec);
  };
  const double t0 = wall_seconds();
  try {
    int64_t total = 0;
    for_each_document(corpus, CorpusSplit::train, [&](int64_t, const std::string&, const std::string& text) {
      paragraph_lines(text, [&](const std::string&) { ++total; });
    });
    const int64_t keep = std::min(total, max_sentences);
    int64_t j = 0, written = 0, bytes = 0;
    {
      std::ofstream out(text_path, std::ios::binary);
      if (!out) throw Error("tokenizer " + spec + ": cannot create " + text_path.string());
      for_each_document(corpus, CorpusSplit::train, [&](int64_t, const std::string&, const std::string& text) {
        paragraph_lines(text, [&](const std::string& line) {
          // line j is kept when floor((j + 1) keep / total) > floor(j keep / total): exactly `keep`, evenly spaced
          if (keep == total || (j + 1) * keep / total > j * keep / total) {
            out << line << '\n';
            ++written;
            bytes += static_cast<int64_t>(line.size()) + 1;
          }
          ++j;
        });
      });
      if (!out.flush()) throw Error("tokenizer " + spec + ": cannot write " + text_path.string());
    }
    if (log) {
      char size[32];
      std::snprintf(size, sizeof size, "%.1f MB", static_cast<double>(bytes) / 1e6);
      log("tokenizer " + spec + ": training SentencePiece " + type + " on " + std::to_string(written) + " of " +
          std::to_string(total) + " paragraphs (" + size + ") of " + corpus.label());
    }
    SentencePieceTrainOptions o;
    o.inputs = {text_path.string()};
    o.vocab_size = *n;
    o.model_type = type;
    o.out_prefix = prefix.string();
    o.character_coverage = 0.9995;
    o.byte_fallback = true;
    o.input_sentence_size = max_sentences;
    try {
      train_sentencepiece(o);
    } catch (const Error& e) {
      throw Error("tokenizer " + spec + " on corpus " + corpus.label() + ": " + e.what());
    }
    for (const char* ext : {".vocab", ".model"}) {
      fs::rename(prefix.string() + ext, dir / (key + ext), ec);
      if (ec) throw Error("tokenizer " + spec + ": cannot rename " + prefix.string() + ext + ": " + ec.message());
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  if (log) log("tokenizer " + spec + ": wrote " + model.string() + " in " + format_duration(wall_seconds() - t0));
  return model.string();
}

}  // namespace mnemo
