// Shipped data files -> the Hugging Face dataset schema each lm-eval task reads (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext), so the
// task specs can use lm-eval's YAML prompts verbatim. HellaSwag's process_docs/preprocess follow
// lm_eval/tasks/hellaswag/utils.py.
#include "tasks/harness/py_compat.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

std::string hellaswag_preprocess(const std::string& text) {
  // text.strip(); .replace(" [title]", ". "); re.sub("\\[.*?\\]", "", text); .replace("  ", " ")
  std::string t = py::replace_all(py::strip(text), " [title]", ". ");
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '[') {
      // "." does not match a newline: the bracket closes before the next '\n' or there is no match here.
      const size_t close = t.find_first_of("]\n", i + 1);
      if (close != std::string::npos && t[close] == ']') {
        i = close + 1;
        continue;
      }
    }
    out += t[i++];
  }
  return py::replace_all(out, "  ", " ");
}

namespace {
const char* kLetters = "ABCDEFGHIJ";

json letter_choices(const std::vector<std::string>& texts, const std::string& where) {
  if (texts.size() > 10) throw Error(where + ": more than 10 choices");
  json labels = json::array();
  for (size_t i = 0; i < texts.size(); ++i) labels.push_back(std::string(1, kLetters[i]));
  return {{"text", texts}, {"label", labels}};
}

int64_t gold_in_range(const json& rec, size_t n, const std::string& where) {
  const int64_t g = require_int(rec, "gold", where);
  if (g < 0 || g >= static_cast<int64_t>(n))
    throw Error(where + ": field 'gold' = " + std::to_string(g) + " is outside the " + std::to_string(n) + " choices");
  return g;
}

// valid.jsonl + valid-labels.lst: label line i (non-blank) belongs to record i, a malformed record included.
std::vector<Document> piqa(const LoadedFile& file, const LoadedFile* labels, const std::string& task, bool skip) {
  if (!labels) throw Error("task " + task + ": the piqa format needs a labels file");
  const auto recs = parse_jsonl(file.text, file.file, /*keep_malformed=*/true);
  std::vector<std::pair<int64_t, std::string>> label_lines;  // (line number, stripped text)
  for (size_t pos = 0, line = 1; pos < labels->text.size(); ++line) {
    size_t end = labels->text.find('\n', pos);
    if (end == std::string::npos) end = labels->text.size();
    const std::string lab = py::strip(labels->text.substr(pos, end - pos));
    if (!lab.empty()) label_lines.emplace_back(static_cast<int64_t>(line), lab);
    pos = end + 1;
  }
  if (label_lines.size() < recs.size())
    throw Error(labels->file + ": fewer labels than the " + std::to_string(recs.size()) + " records of " + file.file);
  if (label_lines.size() > recs.size())
    throw Error(labels->file + ": more labels than the " + std::to_string(recs.size()) + " records of " + file.file);
  return documents_from_records(recs, file.file, skip, [&](const json& rec, const std::string& where, size_t i) {
    for (const char* f : {"goal", "sol1", "sol2"}) require_string(rec, f, where);
    const auto& [line, lab] = label_lines[i];
    if (lab != "0" && lab != "1")
      throw Error(where + ": its label (" + labels->file + ":" + std::to_string(line) + ") '" + lab + "' is not 0 or 1");
    json doc = rec;
    doc["label"] = std::stoi(lab);
    return doc;
  });
}

// llm-foundry {query: "Question: q", choices, gold} -> allenai/ai2_arc {question, choices{text,label}, answerKey}
std::vector<Document> arc(const LoadedFile& file, bool skip) {
  return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                [](const json& rec, const std::string& where, size_t) -> json {
    const std::string q = require_string(rec, "query", where);
    if (q.rfind("Question: ", 0) != 0) throw Error(where + ": field 'query' does not start with \"Question: \"");
    const auto choices = require_strings(rec, "choices", where);
    const int64_t g = gold_in_range(rec, choices.size(), where);
    return {{"question", q.substr(10)}, {"choices", letter_choices(choices, where)},
            {"answerKey", std::string(1, kLetters[g])}};
  });
}

// llm-foundry {query, choices, gold} -> allenai/openbookqa main {question_stem, choices{text,label}, answerKey}
std::vector<Document> openbookqa(const LoadedFile& file, bool skip) {
  return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                [](const json& rec, const std::string& where, size_t) -> json {
    const auto choices = require_strings(rec, "choices", where);
    const int64_t g = gold_in_range(rec, choices.size(), where);
    return {{"question_stem", require_string(rec, "query", where)}, {"choices", letter_choices(choices, where)},
            {"answerKey", std::string(1, kLetters[g])}};
  });
}

// llm-foundry {query: "Passage: p\nQuestion: q?", choices: [no, yes], gold} -> super_glue boolq {passage, question,
// label}: split at the LAST "\nQuestion: " (one passage contains the marker), drop the "?" the copy appended.
std::vector<Document> boolq(const LoadedFile& file, bool skip) {
  return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                [](const json& rec, const std::string& where, size_t) -> json {
    const std::string q = require_string(rec, "query", where);
    const size_t split = q.rfind("\nQuestion: ");
    if (q.rfind("Passage: ", 0) != 0 || split == std::string::npos || split < 9)
      throw Error(where + ": field 'query' is not \"Passage: ...\\nQuestion: ...\"");
    std::string question = q.substr(split + 11);
    if (!question.empty() && question.back() == '?') question.pop_back();
    const int64_t g = gold_in_range(rec, 2, where);
    return {{"passage", q.substr(9, split - 9)}, {"question", question}, {"label", g}};
  });
}

// common-bench {context, question, options[3], answer} -> lighteval/siqa {context, question, answerA..C, label "1".."3"}
std::vector<Document> siqa(const LoadedFile& file, bool skip) {
  return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                [](const json& rec, const std::string& where, size_t) -> json {
    const auto options = require_strings(rec, "options", where);
    if (options.size() != 3) throw Error(where + ": field 'options' has " + std::to_string(options.size()) + " entries, expected 3");
    const std::string answer = require_string(rec, "answer", where);
    size_t g = 0;
    while (g < options.size() && options[g] != answer) ++g;  // the first equal option (one item repeats a text)
    if (g == options.size()) throw Error(where + ": field 'answer' is not one of the options");
    return {{"context", require_string(rec, "context", where)}, {"question", require_string(rec, "question", where)},
            {"answerA", options[0]}, {"answerB", options[1]}, {"answerC", options[2]}, {"label", std::to_string(g + 1)}};
  });
}

// rowanz/hellaswag hellaswag_val.jsonl rows -> lm-eval process_docs: query, choices, gold added to the row.
std::vector<Document> hellaswag_original(const LoadedFile& file, bool skip) {
  return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                [](const json& rec, const std::string& where, size_t) {
    json doc = rec;
    const std::string ctx = require_string(doc, "ctx_a", where) + " " + py::capitalize(require_string(doc, "ctx_b", where));
    doc["query"] = hellaswag_preprocess(require_string(doc, "activity_label", where) + ": " + ctx);
    json choices = json::array();
    for (const auto& e : require_strings(doc, "endings", where)) choices.push_back(hellaswag_preprocess(e));
    doc["choices"] = choices;
    const json& label = require_field(doc, "label", where);
    std::string l = label.is_string() ? label.get<std::string>() : label.is_number_integer() ? label.dump() : "";
    if (l.empty() || l.size() > 9 || l.find_first_not_of("0123456789") != std::string::npos || std::stoll(l) >= static_cast<long long>(choices.size()))
      throw Error(where + ": field 'label' = " + json_excerpt(label) + " is not a choice index");
    doc["gold"] = std::stoll(l);
    return doc;
  });
}

// klosax hellaswag_val_full.txt: 6 lines per item ("activity_label: ctx", label, 4 endings), already preprocessed
// from `ctx` by its source; lm-eval's preprocess is applied again (it removes the bracketed text 14 lines kept).
std::vector<Document> hellaswag_text(const LoadedFile& file, bool skip) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= file.text.size()) {
    size_t end = file.text.find('\n', pos);
    if (end == std::string::npos) end = file.text.size();
    lines.push_back(file.text.substr(pos, end - pos));
    pos = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() % 6 != 0)
    throw Error(file.file + ":" + std::to_string(lines.size()) + ": " + std::to_string(lines.size()) +
                " lines is not a whole number of 6-line items (context, label, 4 endings)");
  std::vector<JsonLine> items;  // one per 6-line item, at its first line
  for (size_t i = 0; i < lines.size(); i += 6) items.push_back({static_cast<int64_t>(i + 1), json::object(), ""});
  return documents_from_records(items, file.file, skip, [&](const json&, const std::string& where, size_t item) -> json {
    const size_t i = 6 * item;
    const size_t colon = lines[i].find(": ");
    if (colon == std::string::npos) throw Error(where + ": context line has no \"activity_label: \" prefix");
    const std::string& label = lines[i + 1];
    if (label.size() != 1 || label[0] < '0' || label[0] > '3')
      throw Error(where + ": label '" + label + "' (line " + std::to_string(i + 2) + ") is not 0..3");
    json choices = json::array();
    for (size_t k = 2; k < 6; ++k) choices.push_back(hellaswag_preprocess(lines[i + k]));
    return {{"activity_label", lines[i].substr(0, colon)}, {"ctx", lines[i].substr(colon + 2)},
            {"query", hellaswag_preprocess(lines[i])}, {"choices", choices}, {"label", label}, {"gold", label[0] - '0'}};
  });
}
}  // namespace

std::vector<Document> import_documents(const std::string& format, const LoadedFile& file, const LoadedFile* labels,
                                       const std::string& task, bool skip_malformed) {
  const bool skip = skip_malformed;
  if (format == "jsonl")
    return documents_from_records(parse_jsonl(file.text, file.file, /*keep_malformed=*/true), file.file, skip,
                                  [](const json& rec, const std::string&, size_t) { return rec; });
  if (format == "piqa") return piqa(file, labels, task, skip);
  if (format == "arc_llmfoundry") return arc(file, skip);
  if (format == "openbookqa_llmfoundry") return openbookqa(file, skip);
  if (format == "boolq_llmfoundry") return boolq(file, skip);
  if (format == "siqa_commonbench") return siqa(file, skip);
  if (format == "hellaswag_original") return hellaswag_original(file, skip);
  if (format == "hellaswag_text") return hellaswag_text(file, skip);
  throw Error("task " + task + ": unknown data format '" + format + "'");
}

}  // namespace mnemo::harness
