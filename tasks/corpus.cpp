#include "tasks/corpus.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>

#include "tasks/text_utils.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

constexpr const char* kBom = "\xEF\xBB\xBF";

bool all_space(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string lf_only(const std::string& s) {  // CRLF -> LF
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) out.push_back(s[i]);
  return out;
}

void drop_bom(std::string& s) {
  if (s.compare(0, 3, kBom) == 0) s.erase(0, 3);
}

void check_doc_split(const std::string& s) {
  if (s != "auto" && s != "blank_line" && s != "line" && s != "file")
    throw Error("corpus: doc_split must be \"auto\", \"blank_line\", \"line\" or \"file\", got \"" + s + "\"");
}

enum class Kind { folder_txt, txt, jsonl };
struct Entry {
  std::string path;
  Kind kind;
  int64_t bytes;
};

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

std::vector<Entry> list_entries(const CorpusSpec& c) {
  check_doc_split(c.doc_split);
  if (c.inputs.empty()) throw Error("corpus: no inputs given");
  std::vector<Entry> out;
  for (const auto& input : c.inputs) {
    const std::string path = resolve_data_file(input, "corpus input");
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::pair<std::string, Entry>> found;
      fs::directory_iterator it(path, ec), end;
      for (; !ec && it != end; it.increment(ec)) {
        const fs::path p = it->path();
        const std::string ext = lower_extension(p);
        std::error_code fec;  // a dangling link or unreadable entry is not a corpus file
        if ((ext != ".txt" && ext != ".jsonl") || !fs::is_regular_file(p, fec)) continue;
        const auto size = fs::file_size(p, fec);
        if (fec) continue;
        found.push_back({p.filename().string(),
                         Entry{p.string(), ext == ".txt" ? Kind::folder_txt : Kind::jsonl, static_cast<int64_t>(size)}});
      }
      if (ec) throw Error("corpus folder '" + path + "' cannot be listed: " + ec.message());
      if (found.empty()) throw Error("corpus folder '" + path + "' has no .txt or .jsonl files");
      std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& f : found) out.push_back(std::move(f.second));
    } else if (fs::is_regular_file(path, ec)) {
      const std::string ext = lower_extension(path);
      if (ext != ".txt" && ext != ".jsonl")
        throw Error("corpus file '" + path + "': unknown extension '" + ext + "' (expected .txt, .jsonl or a folder)");
      out.push_back({path, ext == ".txt" ? Kind::txt : Kind::jsonl, static_cast<int64_t>(fs::file_size(path))});
    } else {
      throw Error("corpus input '" + path + "' is neither a regular file nor a folder");
    }
  }
  return out;
}

// Lines of a text held in memory or of a file read as a stream; a trailing '\r' is dropped (CRLF -> LF), and a
// BOM at the start. position() counts source bytes consumed.
class Lines {
 public:
  explicit Lines(const std::string* text) : text_(text) {}
  explicit Lines(const std::string& path) : in_(std::make_unique<std::ifstream>(path, std::ios::binary)) {
    if (!*in_) throw Error("cannot open file: " + path);
  }
  bool next(std::string& line) {
    if (text_) {
      if (pos_ >= text_->size()) return false;
      const size_t nl = text_->find('\n', pos_);
      const size_t end = nl == std::string::npos ? text_->size() : nl;
      line.assign(*text_, pos_, end - pos_);
      pos_ = nl == std::string::npos ? end : end + 1;
    } else {
      if (!std::getline(*in_, line)) return false;
      pos_ += line.size() + 1;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first_) {
      drop_bom(line);
      first_ = false;
    }
    ++number_;
    return true;
  }
  int64_t number() const { return number_; }  // 1-based number of the last line returned
  double fraction(int64_t file_bytes) const {  // of the source consumed
    const double total = text_ ? static_cast<double>(text_->size()) : static_cast<double>(file_bytes);
    return total > 0 ? std::min(1.0, static_cast<double>(pos_) / total) : 1.0;
  }

 private:
  const std::string* text_ = nullptr;
  std::unique_ptr<std::ifstream> in_;
  size_t pos_ = 0;
  int64_t number_ = 0;
  bool first_ = true;
};

using DocFn = std::function<void(int64_t, const std::string&, const std::string&)>;
using ProgressFn = std::function<void(int64_t, int64_t)>;

// The one walk over the corpus all public functions share (spec: documents in listing order, index over the
// whole corpus, held out when (index + 1) % val_every == 0).
int64_t walk(const CorpusSpec& c, CorpusSplit split, const DocFn& fn, const ProgressFn& on_progress,
             bool require_documents) {
  const std::vector<Entry> entries = list_entries(c);
  int64_t bytes_total = 0;
  for (const auto& e : entries) bytes_total += e.bytes;
  int64_t index = 0, passed = 0, bytes_done = 0;

  for (const auto& e : entries) {
    const std::string file = fs::path(e.path).filename().string();
    int64_t k = 0;  // non-empty documents of this file so far
    auto emit = [&](const std::string& text, bool whole_file, double fraction) {
      if (all_space(text)) return;
      const int64_t i = index++;
      const bool held_out = c.val_every > 0 && (i + 1) % c.val_every == 0;
      const std::string name = whole_file ? file : file + "#" + std::to_string(k);
      ++k;
      if (split == CorpusSplit::all || held_out == (split == CorpusSplit::validation)) {
        fn(i, name, text);
        ++passed;
      }
      if (on_progress) on_progress(bytes_done + static_cast<int64_t>(fraction * static_cast<double>(e.bytes)), bytes_total);
    };

    if (e.kind == Kind::jsonl) {
      Lines lines(e.path);
      std::string line;
      while (lines.next(line)) {
        if (all_space(line)) continue;
        const std::string where = "corpus file '" + e.path + "':" + std::to_string(lines.number());
        json j;
        try {
          j = parse_json_text(line, "");
        } catch (const Error& ex) {
          throw Error(where + ": malformed JSON line: " + ex.what());
        }
        if (!j.is_object()) throw Error(where + ": expected a JSON object with a string field \"" + c.text_field + "\"");
        const auto it = j.find(c.text_field);
        if (it == j.end()) throw Error(where + ": field \"" + c.text_field + "\" is missing");
        if (!it->is_string())
          throw Error(where + ": field \"" + c.text_field + "\" is not a string (" + it->type_name() + ")");
        std::string text = it->get<std::string>();
        drop_bom(text);
        emit(lf_only(text), false, lines.fraction(e.bytes));
      }
    } else {
      std::string mode = c.doc_split;
      if (e.kind == Kind::folder_txt && mode != "line" && mode != "blank_line") mode = "file";
      if (e.kind == Kind::txt && mode == "auto") mode = "blank_line";
      std::string text = read_text_file(e.path);
      if (c.strip_gutenberg && gutenberg_body_range(text).second != 0) {
        text = gutenberg_body(text);  // also drops the BOM, CRLF -> LF
      } else {
        drop_bom(text);
        text = lf_only(text);
      }
      if (mode == "file") {
        emit(text, true, 1.0);
      } else {
        Lines lines(&text);
        std::string line, doc;
        while (lines.next(line)) {
          if (mode == "line") {
            emit(line, false, lines.fraction(e.bytes));
          } else if (all_space(line)) {  // blank_line: a blank line ends the document
            emit(doc, false, lines.fraction(e.bytes));
            doc.clear();
          } else {
            if (!doc.empty()) doc += '\n';
            doc += line;
          }
        }
        if (mode == "blank_line") emit(doc, false, 1.0);
      }
    }
    bytes_done += e.bytes;
    if (on_progress) on_progress(bytes_done, bytes_total);
  }

  if (index == 0) throw Error("corpus " + c.label() + " has no documents");
  if (require_documents && passed == 0) {
    if (split == CorpusSplit::validation)
      throw Error("corpus " + c.label() + " has no held-out documents (val_every=" + std::to_string(c.val_every) +
                  " over " + std::to_string(index) + " documents); give val_every or a separate validation corpus");
    throw Error("corpus " + c.label() + " has no training documents (val_every=" + std::to_string(c.val_every) +
                " holds out all " + std::to_string(index) + " documents)");
  }
  return passed;
}

}  // namespace

CorpusSpec CorpusSpec::from_json(const json& j) {
  if (!j.is_object()) throw Error("corpus spec: expected a JSON object, got " + json_excerpt(j));
  CorpusSpec c;
  const auto corpus = j.find("corpus");
  if (corpus == j.end()) throw Error("corpus spec: key \"corpus\" is missing");
  if (corpus->is_string()) {
    const std::string s = corpus->get<std::string>();
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t a = part.find_first_not_of(" \t"), b = part.find_last_not_of(" \t");
      part = a == std::string::npos ? "" : part.substr(a, b - a + 1);
      if (part.empty()) throw Error("corpus spec: empty path in corpus \"" + s + "\"");
      c.inputs.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (corpus->is_array()) {
    for (const auto& v : *corpus) {
      if (!v.is_string() || v.get<std::string>().empty())
        throw Error("corpus spec: corpus entries must be non-empty strings, got " + json_excerpt(v));
      c.inputs.push_back(v.get<std::string>());
    }
    if (c.inputs.empty()) throw Error("corpus spec: corpus is an empty array");
  } else {
    throw Error("corpus spec: corpus must be a string \"a,b\" or an array of strings, got " + corpus->dump());
  }
  auto string_key = [&](const char* key, std::string& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_string()) throw Error(std::string("corpus spec: ") + key + " must be a string, got " + it->dump());
    out = it->get<std::string>();
  };
  string_key("doc_split", c.doc_split);
  check_doc_split(c.doc_split);
  string_key("text_field", c.text_field);
  if (c.text_field.empty()) throw Error("corpus spec: text_field is empty");
  if (const auto it = j.find("val_every"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      throw Error("corpus spec: val_every must be an integer >= 0 (0 = no held-out documents), got " + it->dump());
    c.val_every = it->get<int64_t>();
  }
  if (const auto it = j.find("strip_gutenberg"); it != j.end()) {
    if (!it->is_boolean()) throw Error("corpus spec: strip_gutenberg must be true or false, got " + it->dump());
    c.strip_gutenberg = it->get<bool>();
  }
  return c;
}

json CorpusSpec::to_json() const {
  return {{"corpus", inputs},
          {"doc_split", doc_split},
          {"text_field", text_field},
          {"val_every", val_every},
          {"strip_gutenberg", strip_gutenberg}};
}

std::string CorpusSpec::label() const {
  std::string out;
  for (const auto& in : inputs) out += (out.empty() ? "" : ",") + in;
  return out;
}

std::string split_name(CorpusSplit s) {
  switch (s) {
    case CorpusSplit::train: return "train";
    case CorpusSplit::validation: return "validation";
    case CorpusSplit::all: return "all";
  }
  return "all";
}

std::vector<CorpusFile> list_corpus_files(const CorpusSpec& c) {
  std::vector<CorpusFile> out;
  for (const auto& e : list_entries(c)) {
    const std::string bytes = read_text_file(e.path);
    out.push_back({e.path, static_cast<int64_t>(bytes.size()), sha256_hex(bytes)});
  }
  return out;
}

int64_t for_each_document(const CorpusSpec& c, CorpusSplit split, const DocFn& fn) {
  return walk(c, split, fn, nullptr, true);
}

int64_t for_each_document(const CorpusSpec& c, CorpusSplit split, const DocFn& fn, const ProgressFn& on_progress) {
  return walk(c, split, fn, on_progress, true);
}

std::vector<std::string> validation_document_names(const CorpusSpec& c) {
  std::vector<std::string> names;
  walk(c, CorpusSplit::validation, [&](int64_t, const std::string& name, const std::string&) { names.push_back(name); },
       nullptr, false);
  return names;
}

}  // namespace mnemo
