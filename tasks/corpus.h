// Text corpora for language-model pretraining (docs/tasks.md#language-modelling): folders of .txt files,
// plain-text files split into documents, JSONL files with a text field; a deterministic held-out split.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// A corpus: any number of inputs, each a folder (every *.txt / *.jsonl file in it, sorted by file name, one
// document per .txt file), a .txt file (documents split per `doc_split`), or a .jsonl file (one document per
// line, field `text_field`).
struct CorpusSpec {
  std::vector<std::string> inputs;  // absolute, relative to the working directory, or relative to data_dir()
  // .txt FILES given directly: "blank_line" (documents separated by one or more blank lines; the "auto" choice),
  // "line" (one per non-empty line), "file" (the whole file). Inside a folder each .txt file is one document
  // unless doc_split is "line" / "blank_line".
  std::string doc_split = "auto";
  std::string text_field = "text";  // JSONL field
  // Document i (0-based over the whole corpus, in listing order) is held out for validation when
  // (i + 1) % val_every == 0; 0 = no held-out documents.
  int64_t val_every = 10;
  bool strip_gutenberg = true;  // Project Gutenberg files (START/END markers present) keep only gutenberg_body()

  // Keys: corpus (string "a,b" or array of strings), doc_split, text_field, val_every, strip_gutenberg; keys
  // other than these are ignored (a flat run configuration may be passed), wrong types and values are Errors.
  static CorpusSpec from_json(const json& j);
  json to_json() const;  // the same keys, corpus as an array
  std::string label() const;  // the inputs joined by "," (for messages)
};

struct CorpusFile {
  std::string path;  // as resolved (data-dir inputs get the data-dir prefix)
  int64_t bytes = 0;
  std::string sha256;  // of the file bytes (hex)
};

enum class CorpusSplit { train, validation, all };
std::string split_name(CorpusSplit);  // "train", "validation", "all"

// Every file of the corpus in listing order, hashed. Error: missing path, folder without .txt/.jsonl, unknown
// extension, unknown doc_split.
std::vector<CorpusFile> list_corpus_files(const CorpusSpec&);

// Calls fn(index, name, text) for every document of `split`; index is the document's 0-based position in the
// whole corpus (the one val_every is applied to), name "file" (whole-file documents) or "file#k" (k-th document
// of the file, 0-based). CRLF -> LF; a UTF-8 BOM is dropped; empty (all-whitespace) documents are skipped and
// do not count for the index. Returns the number of documents passed to fn. Errors: a malformed JSONL line or
// a missing / non-string text field (naming file:line and the field), a corpus without documents, an empty
// split (validation: "no held-out documents").
int64_t for_each_document(const CorpusSpec&, CorpusSplit,
                          const std::function<void(int64_t index, const std::string& name, const std::string& text)>& fn);

// The same, with on_progress(source bytes read so far, source bytes in all files) after every document (the
// token-shard builder's progress line).
int64_t for_each_document(const CorpusSpec&, CorpusSplit,
                          const std::function<void(int64_t index, const std::string& name, const std::string& text)>& fn,
                          const std::function<void(int64_t bytes_read, int64_t bytes_total)>& on_progress);

// Names of the held-out documents (for the README/report: "every 10th book by file name").
std::vector<std::string> validation_document_names(const CorpusSpec&);

}  // namespace mnemo
