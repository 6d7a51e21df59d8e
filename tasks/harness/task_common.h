// Shared pieces of the zero-shot tasks: checked data files, JSON-lines parsing with file:line errors,
// lm-eval's multiple-choice scoring, the task factories, and the text transforms the tests pin down.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/harness/harness_task.h"

namespace mnemo::harness {

// One data file of a task, relative to the data directory.
struct DataSource {
  std::string file;
  std::string sha256;          // expected (SHA256SUMS / MANIFEST); empty = not known
  bool checksum_required = true;  // false: a different file is accepted and flagged matches_reference = false
  bool matches_reference = true;  // the file reproduces lm-eval's documents (MANIFEST)
  std::string note;
};

struct LoadedFile {
  std::string file, path, text, sha256, note;
  bool matches_reference = true;
  bool modified = false;  // a required checksum differed and the file was read anyway (--skip-malformed)
  json entry() const;     // {"file", "sha256", "matches_reference", "note"} (+ "modified": true)
};

bool data_file_exists(const std::string& relative);
// Reads and checks a data file: missing -> Error naming the path; wrong checksum -> Error naming the file, the
// expected and the actual SHA-256 (or, when !checksum_required or accept_modified (--skip-malformed),
// matches_reference = false with a note saying so).
LoadedFile load_data_file(const DataSource& source, const std::string& task, bool accept_modified = false);

// One JSON object per non-blank line, with its 1-based line number. Errors name "file:line" and what is wrong;
// with keep_malformed, such a line is kept instead, with `error` set (a record's index is its place among the
// non-blank lines, malformed or not).
struct JsonLine {
  int64_t line = 0;
  json value;
  std::string error;  // keep_malformed: why the line is not a JSON object ("" = fine)
  std::string where(const std::string& file) const { return file + ":" + std::to_string(line); }
};
std::vector<JsonLine> parse_jsonl(const std::string& text, const std::string& file, bool keep_malformed = false);
// rec[field] or an Error "<where>: field 'x' missing" / "... is not a string|an integer|an array of strings".
const json& require_field(const json& rec, const std::string& field, const std::string& where);
std::string require_string(const json& rec, const std::string& field, const std::string& where);
int64_t require_int(const json& rec, const std::string& field, const std::string& where);
std::vector<std::string> require_strings(const json& rec, const std::string& field, const std::string& where);

// lm-eval multiple-choice process_results (lm_eval/api/task.py ConfigurableTask.process_results): pred =
// numpy.argmax(lls) (ties -> lowest index), acc_norm = argmax(lls / len(choice)) with len in characters of the
// choice string (no delimiter); a gold outside the choices (-100 in lm-eval) scores 0.
json multiple_choice_results(const std::vector<std::string>& choices, int64_t gold,
                             const std::vector<Response>& responses, const std::vector<MetricSpec>& metrics,
                             const std::string& task);
void check_response_count(const std::string& task, size_t expected, size_t got);

// A task's documents converted to lm-eval's dataset schema, each with its "file:line" for error messages.
struct Document {
  json doc;
  std::string where;
  std::string malformed;  // skip_malformed: why the record was skipped ("" = a document); doc is then null
};
// One document per record, in order (records from parse_jsonl with keep_malformed): make(record, where, index)
// builds it and throws an Error naming where and the field for a malformed record. With skip_malformed, a record
// that is not a JSON object or whose make throws becomes a malformed placeholder at its index; without, the first
// malformed record in file order is the Error.
std::vector<Document> documents_from_records(const std::vector<JsonLine>& records, const std::string& file,
                                             bool skip_malformed,
                                             const std::function<json(const json& record, const std::string& where, size_t index)>& make);
// Runs check(doc) on every document; with skip_malformed, one whose check throws becomes a malformed placeholder,
// else the Error propagates (tasks that validate documents after import: templates, WinoGrande's blank).
void check_documents(std::vector<Document>& docs, bool skip_malformed, const std::function<void(const Document&)>& check);
// The malformed placeholders of `docs` as {doc_id, where, reason}.
std::vector<MalformedRecord> malformed_records_of(const std::vector<Document>& docs);
// The document at doc_id; Error for an index outside the documents or a malformed record.
const Document& document_at(const std::vector<Document>& docs, int64_t doc_id, const std::string& task);
// format: "jsonl" (records as they are), "piqa" (valid.jsonl + labels), "arc_llmfoundry", "openbookqa_llmfoundry",
// "boolq_llmfoundry", "siqa_commonbench", "hellaswag_original" (lm-eval process_docs), "hellaswag_text".
std::vector<Document> import_documents(const std::string& format, const LoadedFile& file, const LoadedFile* labels,
                                       const std::string& task, bool skip_malformed = false);
// The multiple-choice task specs (tasks/harness/task_specs.cpp): the built-in tasks/specs/*.json, then the *.json
// files of the folders in $MNEMO_TASK_PATH. Each is checked (Error naming the file and the field); a task defined
// twice is an Error naming both files.
struct TaskSpecFile {
  std::string path;  // "tasks/specs/piqa.json" for a built-in, else the file's path
  json spec;
  bool builtin = true;
};
std::vector<TaskSpecFile> task_spec_files();

// Factories (nullptr from make_spec_task when `name` has no JSON spec).
std::unique_ptr<HarnessTask> make_spec_task(const std::string& name);
std::vector<std::string> spec_task_names();
std::unique_ptr<HarnessTask> make_winogrande_task();
std::unique_ptr<HarnessTask> make_lambada_openai_task();
std::unique_ptr<HarnessTask> make_wikitext_task();

// lm_eval/tasks/hellaswag/utils.py preprocess.
std::string hellaswag_preprocess(const std::string& text);
// The WikiText pages as lm-eval's wikitext dataset script builds them from the raw file (universal newlines).
std::vector<std::string> wikitext_pages(const std::string& raw_text);
// lm_eval/tasks/wikitext/preprocess_wikitext.py wikitext_detokenizer.
std::string wikitext_detokenize(const std::string& page);

}  // namespace mnemo::harness
