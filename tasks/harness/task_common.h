// Shared pieces of the zero-shot tasks (issue 16): checked data files, JSON-lines parsing with file:line errors,
// lm-eval's multiple-choice scoring, the task factories, and the text transforms the tests pin down.
#pragma once
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
  json entry() const;  // {"file", "sha256", "matches_reference", "note"}
};

bool data_file_exists(const std::string& relative);
// Reads and checks a data file: missing -> Error naming the path; wrong checksum -> Error naming the file, the
// expected and the actual SHA-256 (or, when !checksum_required, matches_reference = false with a note).
LoadedFile load_data_file(const DataSource& source, const std::string& task);

// One JSON object per non-blank line, with its 1-based line number. Errors name "file:line" and what is wrong.
struct JsonLine {
  int64_t line = 0;
  json value;
  std::string where(const std::string& file) const { return file + ":" + std::to_string(line); }
};
std::vector<JsonLine> parse_jsonl(const std::string& text, const std::string& file);
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
};
// format: "jsonl" (records as they are), "piqa" (valid.jsonl + labels), "arc_llmfoundry", "openbookqa_llmfoundry",
// "boolq_llmfoundry", "siqa_commonbench", "hellaswag_original" (lm-eval process_docs), "hellaswag_text".
std::vector<Document> import_documents(const std::string& format, const LoadedFile& file, const LoadedFile* labels,
                                       const std::string& task);
// The compiled-in JSON task specs (tasks/harness/task_specs.cpp), in registry order.
const std::vector<const char*>& builtin_task_specs();

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
