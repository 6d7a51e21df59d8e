// The zero-shot tasks whose rules need code (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext): WinoGrande's partial scoring
// (lm_eval/tasks/winogrande/preprocess_winogrande.py, multiple-input: the choices are contexts), LAMBADA
// (lm_eval/tasks/lambada/lambada_openai.yaml; ConfigurableTask.process_results for loglikelihood) and WikiText
// (lm_eval/tasks/wikitext/{wikitext.yaml, preprocess_wikitext.py}; pages as lm-eval's wikitext dataset script
// builds them: lm_eval/datasets/wikitext/wikitext.py `_generate_examples`, EleutherAI/wikitext_document_level).
#include <mutex>

#include "tasks/harness/py_compat.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

// ---- WikiText -------------------------------------------------------------------------------------------
std::vector<std::string> wikitext_pages(const std::string& raw_text) {
  // open(..., encoding="utf-8").read(): universal newlines ("\r\n" and "\r" -> "\n"); then .split("\n").
  std::string text = py::replace_all(py::replace_all(raw_text, "\r\n", "\n"), "\r", "\n");
  std::vector<std::string> pages, ret;
  auto join = [](const std::vector<std::string>& lines) {
    std::string s;
    for (size_t i = 0; i < lines.size(); ++i) s += (i ? "\n" : "") + lines[i];
    return s;
  };
  size_t pos = 0;
  while (true) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    // A top-level title " = Title = " starts a page; section titles " = = x = = " collapse to "== x ==".
    const std::string r = py::strip(py::replace_all(py::replace_all(line, "= = =", "==="), "= =", "=="));
    if (r.rfind("= ", 0) == 0 && r.size() >= 2 && r.compare(r.size() - 2, 2, " =") == 0) {
      const std::string page = join(ret);
      if (!py::strip(page).empty()) pages.push_back(page);
      ret.clear();
    }
    ret.push_back(line);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  pages.push_back(join(ret));  // the last page is kept unconditionally, as the script does
  return pages;
}

namespace {
// re.sub(open \s*([^close]*?)\s* close, open \1 close): each match runs from an opener to the first closer after
// it; the inner text loses its surrounding whitespace.
std::string collapse_inside(const std::string& s, char open, char close) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t o = s.find(open, pos);
    if (o == std::string::npos) break;
    const size_t c = s.find(close, o + 1);
    if (c == std::string::npos) break;
    out.append(s, pos, o - pos);
    out += open;
    out += py::strip(s.substr(o + 1, c - o - 1));
    out += close;
    pos = c + 1;
  }
  return out.append(s, pos, std::string::npos);
}

// re.sub(r"/' [0-9]/", r"/'[0-9]/", s): the pattern is literal apart from one ASCII digit, and so is the
// replacement (lm-eval's rule, kept as it is).
std::string literal_digit_rule(const std::string& s) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find("/' ", pos)) != std::string::npos;) {
    if (hit + 4 < s.size() && s[hit + 3] >= '0' && s[hit + 3] <= '9' && s[hit + 4] == '/') {
      out.append(s, pos, hit - pos).append("/'[0-9]/");
      pos = hit + 5;
    } else {
      out.append(s, pos, hit + 1 - pos);
      pos = hit + 1;
    }
  }
  return out.append(s, pos, std::string::npos);
}
}  // namespace

std::string wikitext_detokenize(const std::string& page) {
  using py::replace_all;
  std::string s = replace_all(page, "s '", "s'");
  s = literal_digit_rule(s);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {" @-@ ", "-"}, {" @,@ ", ","}, {" @.@ ", "."}, {" : ", ": "}, {" ; ", "; "}, {" . ", ". "},
           {" ! ", "! "}, {" ? ", "? "}, {" , ", ", "}})
    s = replace_all(s, from, to);
  for (const auto& [o, c] : std::vector<std::pair<char, char>>{{'(', ')'}, {'[', ']'}, {'{', '}'}, {'"', '"'}, {'\'', '\''}})
    s = collapse_inside(s, o, c);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"= = = =", "===="}, {"= = =", "==="}, {"= =", "=="}, {" \xC2\xB0 ", "\xC2\xB0"}, {" \n", "\n"},
           {"\n ", "\n"}, {" N ", " 1 "}, {" 's", "'s"}})
    s = replace_all(s, from, to);
  return s;
}

namespace {

// Documents loaded once from the first usable source.
class CodeTask : public HarnessTask {
 public:
  int64_t num_docs() const override { return static_cast<int64_t>(docs().size()); }
  json doc(int64_t doc_id) const override { return at(doc_id).doc; }
  json data_files() const override {
    docs();
    return json::array({file_.entry()});
  }
  void configure(const HarnessTaskContext& ctx) override { skip_malformed_ = ctx.skip_malformed; }
  std::vector<MalformedRecord> malformed_records() const override { return malformed_records_of(docs()); }

 protected:
  virtual std::vector<DataSource> sources() const = 0;
  virtual std::vector<Document> parse(const LoadedFile& f, bool skip_malformed) const = 0;
  const std::vector<Document>& docs() const {
    std::call_once(once_, [this] {
      const auto src = sources();
      size_t i = 0;
      while (i + 1 < src.size() && !data_file_exists(src[i].file)) ++i;  // fall back to the next copy
      file_ = load_data_file(src[i], name(), skip_malformed_);
      docs_ = parse(file_, skip_malformed_);
      if (docs_.empty()) throw Error("task " + name() + ": " + file_.path + " holds no documents");
    });
    return docs_;
  }
  const Document& at(int64_t doc_id) const { return document_at(docs(), doc_id, name()); }
  static Request request(RequestType type, std::vector<std::string> args, int64_t doc_id, int64_t idx) {
    Request r;
    r.type = type;
    r.arguments = std::move(args);
    r.doc_id = doc_id;
    r.idx = idx;
    return r;
  }

 private:
  bool skip_malformed_ = false;
  mutable std::once_flag once_;
  mutable std::vector<Document> docs_;
  mutable LoadedFile file_;
};

// ---- WinoGrande: contexts = sentence[:idx] + option_j, continuation = " " + sentence[idx+1:].strip() -------------
struct Wino {
  std::vector<std::string> contexts;
  std::string continuation;  // without the target delimiter (lm-eval doc_to_target)
  int64_t gold = 0;
};

Wino wino_parts(const json& doc, const std::string& where) {
  Wino w;
  if (doc.contains("sentence")) {  // the original winogrande_xl schema (lm-eval's dataset)
    const std::string s = require_string(doc, "sentence", where);
    const size_t idx = s.find('_');
    if (idx == std::string::npos) throw Error(where + ": field 'sentence' has no '_' blank");
    for (const char* f : {"option1", "option2"}) w.contexts.push_back(s.substr(0, idx) + require_string(doc, f, where));
    w.continuation = py::strip(s.substr(idx + 1));
    const std::string a = require_string(doc, "answer", where);
    if (a != "1" && a != "2") throw Error(where + ": field 'answer' = '" + a + "' is not \"1\" or \"2\"");
    w.gold = a == "1" ? 0 : 1;
    return w;
  }
  // The shipped llm-foundry copy: the two contexts already substituted, the shared continuation, gold.
  w.contexts = require_strings(doc, "context_options", where);
  if (w.contexts.size() != 2) throw Error(where + ": field 'context_options' must hold 2 contexts");
  w.continuation = py::strip(require_string(doc, "continuation", where));
  w.gold = require_int(doc, "gold", where);
  if (w.gold < 0 || w.gold > 1) throw Error(where + ": field 'gold' = " + std::to_string(w.gold) + " is not 0 or 1");
  return w;
}

class Winogrande : public CodeTask {
 public:
  std::string name() const override { return "winogrande"; }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "multiple_choice"; }
  std::vector<MetricSpec> metrics() const override { return {{"acc", "mean", true}}; }
  std::string target(const json& doc) const override { return wino_parts(doc, "winogrande document").continuation; }
  std::vector<Request> requests(int64_t doc_id) const override {
    const Document& d = at(doc_id);
    const Wino w = wino_parts(d.doc, d.where);
    std::vector<Request> out;
    for (size_t j = 0; j < w.contexts.size(); ++j)
      out.push_back(request(RequestType::loglikelihood, {w.contexts[j], " " + w.continuation}, doc_id, static_cast<int64_t>(j)));
    return out;
  }
  json process_results(const json& doc, const std::vector<Response>& responses) const override {
    const Wino w = wino_parts(doc, "winogrande document");
    return multiple_choice_results(w.contexts, w.gold, responses, metrics(), name());
  }

 protected:
  std::vector<DataSource> sources() const override {
    return {{"eval/winogrande.jsonl", "ea1592526f3bfdd0948ed3acb1b4dfa3f83d23698917118688ee1df7f8d4b8d7", true, true,
             "winogrande_xl validation (llm-foundry copy); reproduces lm-eval's winogrande requests exactly"}};
  }
  std::vector<Document> parse(const LoadedFile& f, bool skip) const override {
    return documents_from_records(parse_jsonl(f.text, f.file, /*keep_malformed=*/true), f.file, skip,
                                  [](const json& rec, const std::string& where, size_t) {
                                    wino_parts(rec, where);  // validate now: a malformed record names its line
                                    return rec;
                                  });
  }
};

// ---- LAMBADA (OpenAI): context = text.split(' ')[:-1] joined, continuation = ' ' + the last word ---------------
std::pair<std::string, std::string> lambada_split(const json& doc, const std::string& where) {
  const std::string text = require_string(doc, "text", where);
  const size_t last = text.rfind(' ');
  if (last == std::string::npos) return {"", " " + text};
  return {text.substr(0, last), " " + text.substr(last + 1)};
}

class LambadaOpenai : public CodeTask {
 public:
  std::string name() const override { return "lambada_openai"; }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "loglikelihood"; }
  std::vector<MetricSpec> metrics() const override {
    return {{"perplexity", "perplexity", false}, {"acc", "mean", true}};
  }
  std::string target(const json& doc) const override { return lambada_split(doc, "lambada_openai document").second; }
  std::vector<Request> requests(int64_t doc_id) const override {
    const Document& d = at(doc_id);
    const auto [ctx, cont] = lambada_split(d.doc, d.where);
    return {request(RequestType::loglikelihood, {ctx, cont}, doc_id, 0)};
  }
  json process_results(const json& doc, const std::vector<Response>& responses) const override {
    check_response_count(name(), 1, responses.size());
    return {{"perplexity", responses[0].ll}, {"acc", responses[0].is_greedy ? 1 : 0}};
  }

 protected:
  std::vector<DataSource> sources() const override {
    return {{"eval/lambada_openai.jsonl", "411bfbe5b9054346b6a19299c0242670adbefb9162efd958593cbc0290b8c9dc", true,
             false,
             "llm-foundry copy of LAMBADA (OpenAI) test, rejoined as context + \" \" + continuation; differs from "
             "lm-eval's EleutherAI/lambada_openai in at least one record: scores are not comparable exactly"}};
  }
  std::vector<Document> parse(const LoadedFile& f, bool skip) const override {
    return documents_from_records(parse_jsonl(f.text, f.file, /*keep_malformed=*/true), f.file, skip,
                                  [](const json& rec, const std::string& where, size_t) -> json {
      if (rec.contains("text")) {  // lm-eval's own schema
        require_string(rec, "text", where);
        return rec;
      }
      const std::string cont = require_string(rec, "continuation", where);
      if (cont.find(' ') != std::string::npos) throw Error(where + ": field 'continuation' holds a space");
      return {{"text", require_string(rec, "context", where) + " " + cont}};
    });
  }
};

// ---- WikiText-2 (raw), document level: one rolling loglikelihood per detokenised page ----------------------
class Wikitext : public CodeTask {
 public:
  std::string name() const override { return "wikitext"; }
  std::string version() const override { return "2.0"; }
  std::string output_type() const override { return "loglikelihood_rolling"; }
  std::vector<MetricSpec> metrics() const override {
    return {{"word_perplexity", "weighted_perplexity", false},
            {"byte_perplexity", "weighted_perplexity", false},
            {"bits_per_byte", "bits_per_byte", false}};
  }
  std::string target(const json& doc) const override {
    return wikitext_detokenize(require_string(doc, "page", "wikitext document"));
  }
  std::vector<Request> requests(int64_t doc_id) const override {
    return {request(RequestType::loglikelihood_rolling, {target(at(doc_id).doc)}, doc_id, 0)};
  }
  // preprocess_wikitext.process_results: words and bytes of the ORIGINAL page (before detokenisation).
  json process_results(const json& doc, const std::vector<Response>& responses) const override {
    check_response_count(name(), 1, responses.size());
    const std::string page = require_string(doc, "page", "wikitext document");
    const double ll = responses[0].ll;
    const int64_t words = py::count_split_whitespace(page), bytes = static_cast<int64_t>(page.size());
    return {{"word_perplexity", {ll, words}}, {"byte_perplexity", {ll, bytes}}, {"bits_per_byte", {ll, bytes}}};
  }

 protected:
  std::vector<DataSource> sources() const override {
    return {{"eval/wikitext-2-raw/wiki.test.raw.restored",
             "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08", true, true,
             "WikiText-2 raw test with its blank lines restored: the 62 pages equal lm-eval's wikitext documents"},
            {"eval/wikitext-2-raw/wiki.test.raw.lf", "bbf94c53a05abe9ee670d3b6343608095822c85e26de37c70b24fc571964574a",
             true, false,
             "fallback: this copy lacks the blank lines, so its pages differ from lm-eval's wikitext documents "
             "(Wiki. ppl not comparable); restore eval/wikitext-2-raw/wiki.test.raw.restored"}};
  }
  std::vector<Document> parse(const LoadedFile& f, bool) const override {  // pages: no records to be malformed
    std::vector<Document> docs;
    const auto pages = wikitext_pages(f.text);
    for (size_t i = 0; i < pages.size(); ++i) docs.push_back({{{"page", pages[i]}}, f.file + " page " + std::to_string(i), ""});
    return docs;
  }
};

}  // namespace

std::unique_ptr<HarnessTask> make_winogrande_task() { return std::make_unique<Winogrande>(); }
std::unique_ptr<HarnessTask> make_lambada_openai_task() { return std::make_unique<LambadaOpenai>(); }
std::unique_ptr<HarnessTask> make_wikitext_task() { return std::make_unique<Wikitext>(); }

}  // namespace mnemo::harness
