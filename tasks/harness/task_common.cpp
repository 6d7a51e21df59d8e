#include "tasks/harness/task_common.h"

#include <cmath>
#include <filesystem>

#include "tasks/harness/py_compat.h"

namespace mnemo::harness {

json LoadedFile::entry() const {
  json e = {{"file", file}, {"sha256", sha256}, {"matches_reference", matches_reference}, {"note", note}};
  if (modified) e["modified"] = true;
  return e;
}

bool data_file_exists(const std::string& relative) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(data_dir()) / relative, ec);
}

LoadedFile load_data_file(const DataSource& source, const std::string& task, bool accept_modified) {
  LoadedFile f;
  f.file = source.file;
  if (!data_file_exists(source.file))
    throw Error("task " + task + ": data file " + (std::filesystem::path(data_dir()) / source.file).string() +
                " not found (expected " + source.file +
                (source.sha256.empty() ? "" : ", SHA-256 " + source.sha256) +
                "; set the data directory with --data-dir or MNEMO_DATA_DIR)");
  f.path = data_path(source.file);
  f.text = read_text_file(f.path);
  f.sha256 = sha256_hex(f.text);
  f.matches_reference = source.matches_reference;
  f.note = source.note;
  if (!source.sha256.empty() && f.sha256 != source.sha256) {
    if (source.checksum_required && !accept_modified)
      throw Error("task " + task + ": data file " + f.path + " has SHA-256 " + f.sha256 + ", expected " +
                  source.sha256 + " (the file listed in the data directory's SHA256SUMS; restore that copy, or "
                  "evaluate this one with --skip-malformed: its malformed records are skipped and its scores marked "
                  "not comparable)");
    f.matches_reference = false;
    f.modified = source.checksum_required;
    f.note = "SHA-256 " + f.sha256 + " differs from the reference copy's " + source.sha256 +
             (f.modified ? " (read under --skip-malformed)" : "") + ": documents may differ from lm-eval's" +
             (f.note.empty() || f.modified ? "" : "; " + f.note);  // the reference copy's note no longer holds
  }
  return f;
}

std::vector<JsonLine> parse_jsonl(const std::string& text, const std::string& file, bool keep_malformed) {
  std::vector<JsonLine> out;
  size_t pos = 0;
  for (int64_t line = 1; pos < text.size(); ++line) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(pos, end - pos);
    pos = end + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (py::strip(s).empty()) continue;
    JsonLine r;
    r.line = line;
    try {
      r.value = parse_json_text(s, "");  // duplicate keys and over-deep nesting are malformed too
      if (!r.value.is_object()) r.error = std::string("expected a JSON object, got ") + r.value.type_name();
    } catch (const Error& e) {
      r.error = std::string("malformed JSON record (") + e.what() + ")";
    }
    if (!r.error.empty()) {
      if (!keep_malformed) throw Error(file + ":" + std::to_string(line) + ": " + r.error);
      r.value = nullptr;
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {
// An Error's text without the "where: " it starts with.
std::string reason_of(const std::exception& e, const std::string& where) {
  std::string what = e.what();
  if (what.rfind(where + ": ", 0) == 0) what = what.substr(where.size() + 2);
  return what;
}
}  // namespace

std::vector<Document> documents_from_records(const std::vector<JsonLine>& records, const std::string& file,
                                             bool skip_malformed,
                                             const std::function<json(const json&, const std::string&, size_t)>& make) {
  std::vector<Document> docs;
  docs.reserve(records.size());
  for (const auto& r : records) {
    const std::string where = r.where(file);
    if (!r.error.empty()) {
      if (!skip_malformed) throw Error(where + ": " + r.error);
      docs.push_back({nullptr, where, r.error});
      continue;
    }
    try {
      docs.push_back({make(r.value, where, docs.size()), where, ""});
    } catch (const Error& e) {
      if (!skip_malformed) throw;
      docs.push_back({nullptr, where, reason_of(e, where)});
    }
  }
  return docs;
}

void check_documents(std::vector<Document>& docs, bool skip_malformed, const std::function<void(const Document&)>& check) {
  for (auto& d : docs) {
    if (!d.malformed.empty()) continue;
    try {
      check(d);
    } catch (const Error& e) {
      if (!skip_malformed) throw;
      d.malformed = reason_of(e, d.where);
      d.doc = nullptr;
    }
  }
}

std::vector<MalformedRecord> malformed_records_of(const std::vector<Document>& docs) {
  std::vector<MalformedRecord> out;
  for (size_t i = 0; i < docs.size(); ++i)
    if (!docs[i].malformed.empty()) out.push_back({static_cast<int64_t>(i), docs[i].where, docs[i].malformed});
  return out;
}

const Document& document_at(const std::vector<Document>& docs, int64_t doc_id, const std::string& task) {
  if (doc_id < 0 || doc_id >= static_cast<int64_t>(docs.size()))
    throw Error("task " + task + ": doc_id " + std::to_string(doc_id) + " outside [0, " + std::to_string(docs.size()) + ")");
  const Document& d = docs[static_cast<size_t>(doc_id)];
  if (!d.malformed.empty())
    throw Error("task " + task + ": document " + std::to_string(doc_id) + " is a malformed record skipped under "
                "--skip-malformed (" + d.where + ": " + d.malformed + ")");
  return d;
}

const json& require_field(const json& rec, const std::string& field, const std::string& where) {
  const auto it = rec.find(field);
  if (it == rec.end()) throw Error(where + ": field '" + field + "' missing");
  return *it;
}

std::string require_string(const json& rec, const std::string& field, const std::string& where) {
  const json& v = require_field(rec, field, where);
  if (!v.is_string()) throw Error(where + ": field '" + field + "' is not a string (" + json_excerpt(v) + ")");
  return v.get<std::string>();
}

int64_t require_int(const json& rec, const std::string& field, const std::string& where) {
  const json& v = require_field(rec, field, where);
  if (!v.is_number_integer()) throw Error(where + ": field '" + field + "' is not an integer (" + json_excerpt(v) + ")");
  return v.get<int64_t>();
}

std::vector<std::string> require_strings(const json& rec, const std::string& field, const std::string& where) {
  const json& v = require_field(rec, field, where);
  if (!v.is_array() || v.empty()) throw Error(where + ": field '" + field + "' is not a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& x : v) {
    if (!x.is_string()) throw Error(where + ": field '" + field + "' has a non-string element " + json_excerpt(x));
    out.push_back(x.get<std::string>());
  }
  return out;
}

void check_response_count(const std::string& task, size_t expected, size_t got) {
  if (expected != got)
    throw Error("task " + task + ": " + std::to_string(got) + " responses for a document with " +
                std::to_string(expected) + " requests");
}

json multiple_choice_results(const std::vector<std::string>& choices, int64_t gold,
                             const std::vector<Response>& responses, const std::vector<MetricSpec>& metrics,
                             const std::string& task) {
  check_response_count(task, choices.size(), responses.size());
  std::vector<double> lls, norm;
  for (size_t i = 0; i < choices.size(); ++i) {
    lls.push_back(responses[i].ll);
    norm.push_back(responses[i].ll / static_cast<double>(py::len(choices[i])));  // numpy: x / 0.0 -> ±inf / nan
  }
  if (gold < 0 || gold >= static_cast<int64_t>(choices.size())) gold = -100;
  json out = json::object();
  for (const auto& m : metrics) {
    if (m.name == "acc") out["acc"] = py::argmax(lls) == gold ? 1.0 : 0.0;
    else if (m.name == "acc_norm") out["acc_norm"] = py::argmax(norm) == gold ? 1.0 : 0.0;
    else throw Error("task " + task + ": metric '" + m.name + "' is not a multiple-choice metric (acc, acc_norm)");
  }
  return out;
}

}  // namespace mnemo::harness
