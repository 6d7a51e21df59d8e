// The recall tasks as HarnessTasks (tasks/harness/recall_tasks.h): documents from <data_dir>/eval/recall/*.jsonl,
// the reference's requests and process_results, and truncate_context with --cutting-context.
#include "tasks/harness/recall_tasks.h"

#include <cmath>
#include <filesystem>
#include <mutex>
#include <tuple>

#include "tasks/harness/py_compat.h"
#include "tasks/harness/qa_metrics.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

const std::vector<RecallTaskInfo>& recall_task_infos() {
  static const std::vector<RecallTaskInfo> infos = [] {
    const std::vector<std::tuple<std::string, std::string, RecallKind>> base = {
        {"fda", "based_fda", RecallKind::fda},
        {"swde", "based_swde", RecallKind::swde},
        {"squad_completion", "based_squad", RecallKind::squad},
        {"nq", "based_nq_2048", RecallKind::nq},
        {"triviaqa", "based_triviaqa", RecallKind::triviaqa},
        {"drop", "based_drop", RecallKind::drop}};
    std::vector<RecallTaskInfo> v;
    for (bool twice : {false, true})
      for (const auto& [name, ref, kind] : base)
        v.push_back({twice ? name + "_twice" : name, twice ? ref + "_twice" : ref, kind, twice,
                     "eval/recall/" + name + ".jsonl"});
    return v;
  }();
  return infos;
}

std::vector<std::string> recall_task_names() {
  std::vector<std::string> names;
  for (const auto& i : recall_task_infos()) names.push_back(i.name);
  return names;
}

namespace {

// Fields each task reads (the twice prompts read more). Optional fields (alt_answers, tok_pos, new_id, doc_id) are
// checked when present and not null (Hugging Face writes null for a column a row lacks).
void validate(const RecallTaskInfo& info, const json& rec, const std::string& where) {
  switch (info.kind) {
    case RecallKind::fda:
    case RecallKind::swde: {
      const std::string text = require_string(rec, "text", where);
      require_string(rec, "key", where);
      require_string(rec, "value", where);
      if (info.kind == RecallKind::swde) {
        // validation_docs: `doc["text"], prompt = doc["text"].split(marker)` (exactly one marker, else it raises)
        size_t count = 0;
        for (size_t p = text.find(kSwdeMarker); p != std::string::npos; p = text.find(kSwdeMarker, p + 1)) ++count;
        if (count != 1)
          throw Error(where + ": field 'text' holds \"" + kSwdeMarker + "\" " + std::to_string(count) +
                      " times; the reference's SWDE validation_docs needs exactly one");
      }
      break;
    }
    case RecallKind::squad:
      require_string(rec, "text", where);
      require_string(rec, "value", where);
      if (info.twice) {
        require_string(rec, "context", where);
        require_string(rec, "question", where);
      }
      break;
    default:
      require_string(rec, "context", where);
      require_string(rec, "question", where);
      require_strings(rec, "answers", where);  // non-empty: contains_score takes the max over them
      if (info.twice) require_string(rec, "orig_question", where);
  }
  if (rec.contains("alt_answers") && !rec["alt_answers"].is_null()) {
    if (!rec["alt_answers"].is_array()) throw Error(where + ": field 'alt_answers' is not an array of strings");
    for (const auto& a : rec["alt_answers"])
      if (!a.is_string()) throw Error(where + ": field 'alt_answers' has a non-string element " + json_excerpt(a));
  }
  if (rec.contains("tok_pos") && !rec["tok_pos"].is_null()) require_int(rec, "tok_pos", where);
}

bool present(const json& doc, const char* field) { return doc.contains(field) && !doc[field].is_null(); }

// The squad_v2 metric's id: datasets casts it to a string.
std::string id_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

class RecallTask : public HarnessTask {
 public:
  explicit RecallTask(RecallTaskInfo info) : info_(std::move(info)) {}
  std::string name() const override { return info_.name; }
  // The reference's VERSION: 0 for FDA, SWDE, SQuAD; "default" for the others.
  std::string version() const override {
    return info_.kind == RecallKind::fda || info_.kind == RecallKind::swde || info_.kind == RecallKind::squad
               ? "0" : "default";
  }
  std::string output_type() const override { return "generate_until"; }
  std::vector<MetricSpec> metrics() const override {
    if (scores_squad()) return {{"exact", "squad_v2_exact", true}, {"f1", "squad_v2_f1", true}, {"contains", "np_mean", true}};
    return {{"contains", "np_mean", true}};
  }
  int64_t num_docs() const override { return static_cast<int64_t>(prepared().size()); }
  json doc(int64_t doc_id) const override { return at(doc_id).doc; }
  std::string target(const json& doc) const override {
    if (by_value()) return require_string(doc, "value", name() + " document");
    const auto answers = require_strings(doc, "answers", name() + " document");
    return " " + answers[0];
  }
  std::vector<Request> requests(int64_t doc_id) const override {
    const Prepared& p = at(doc_id);
    if (p.skipped) return {};
    Request g;
    g.type = RequestType::generate_until;
    g.arguments = {p.prompt};
    g.until = {"\n"};
    g.max_gen_toks = 48;
    g.doc_id = doc_id;
    if (!scores_squad()) return {g};
    Request ll;  // the reference sends it with idx 0 as well; the stable sort keeps it second
    ll.type = RequestType::loglikelihood;
    ll.arguments = {p.prompt, " unanswerable"};
    ll.doc_id = doc_id;
    return {g, ll};
  }
  json process_results(const json& doc, const std::vector<Response>& responses) const override {
    const std::string where = name() + " document";
    check_response_count(name(), scores_squad() ? 2 : 1, responses.size());
    const std::string& continuation = responses[0].text;
    const std::vector<std::string> golds =
        by_value() ? std::vector<std::string>{require_string(doc, "value", where)} : require_strings(doc, "answers", where);
    json out = {{"contains", contains_score(continuation, golds)}};
    if (scores_squad()) {
      const SquadScores s = squad_v2_raw_scores(golds, continuation);
      const json per_doc = {{"id", id_string(require_field(doc, info_.kind == RecallKind::squad ? "new_id" : "doc_id", where))},
                            {"exact", s.exact},
                            {"f1", s.f1},
                            {"has_ans", !golds.empty()},
                            {"no_answer_probability", std::exp(responses[1].ll)}};
      out["exact"] = per_doc;
      out["f1"] = per_doc;
    }
    return out;
  }
  json data_files() const override {
    prepared();
    return json::array({file_.entry()});
  }
  void configure(const HarnessTaskContext& ctx) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ctx.skip_malformed != ctx_.skip_malformed) records_.clear();  // read the file again under the new rule
    ctx_ = ctx;
    ready_ = false;
  }
  std::vector<MalformedRecord> malformed_records() const override {
    prepared();
    return malformed_records_of(records_);
  }

 private:
  struct Prepared {
    json doc;            // the document as the reference's process_results sees it
    std::string prompt;  // doc_to_text
    bool skipped = false;
    bool malformed = false;  // the record, skipped under --skip-malformed (records_ says why)
  };

  bool scores_squad() const { return info_.kind == RecallKind::squad || info_.kind == RecallKind::triviaqa; }
  bool by_value() const {
    return info_.kind == RecallKind::fda || info_.kind == RecallKind::swde || info_.kind == RecallKind::squad;
  }

  const Prepared& at(int64_t doc_id) const {
    const auto& p = prepared();
    if (doc_id < 0 || doc_id >= static_cast<int64_t>(p.size()))
      throw Error("task " + name() + ": doc_id " + std::to_string(doc_id) + " outside [0, " + std::to_string(p.size()) + ")");
    if (p[static_cast<size_t>(doc_id)].malformed) document_at(records_, doc_id, name());  // the Error naming it
    return p[static_cast<size_t>(doc_id)];
  }

  // Loads the file once; builds every document's prompt (cut first with cutting_context) once per configuration,
  // in file order: a cut document's new_id counts the requests of the documents before it, as build_all_requests'.
  const std::vector<Prepared>& prepared() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_) return prepared_;
    if (records_.empty()) load();
    if (ctx_.cutting_context && !ctx_.tokenizer)
      throw Error("task " + name() + ": --cutting-context needs the evaluation's tokenizer (configure was not given one)");
    const RecallCutKeys keys = recall_cut_keys(info_.kind);
    std::vector<Prepared> out;
    int64_t instances = 0;
    for (size_t i = 0; i < records_.size(); ++i) {
      const std::string& where = records_[i].where;
      Prepared p;
      if (!records_[i].malformed.empty()) {  // skipped under --skip-malformed: no document, no instance
        p.malformed = true;
        out.push_back(std::move(p));
        continue;
      }
      p.doc = records_[i].doc;
      if (info_.kind == RecallKind::swde) {  // validation_docs adds the text after the marker as "prompt"
        const std::string text = p.doc["text"].get<std::string>();
        p.doc["prompt"] = text.substr(text.find(kSwdeMarker));
      }
      if (ctx_.cutting_context) {
        const auto cut = recall_cut_context(p.doc, keys, *ctx_.tokenizer, ctx_.add_bos, ctx_.context_length,
                                            ctx_.answer_length, where);
        if (!cut) {
          p.skipped = true;
          out.push_back(std::move(p));
          continue;
        }
        p.doc["new_id"] = instances + 1;
        p.doc[keys.context_key] = *cut;
      } else if (info_.kind == RecallKind::squad && !present(p.doc, "new_id")) {
        p.doc["new_id"] = static_cast<int64_t>(i);  // [decision] the reference needs the field; the rows lack it
      }
      if (info_.kind == RecallKind::triviaqa && !present(p.doc, "doc_id")) p.doc["doc_id"] = static_cast<int64_t>(i);
      p.prompt = recall_doc_to_text(info_.kind, info_.twice, p.doc, where);
      instances += scores_squad() ? 2 : 1;
      out.push_back(std::move(p));
    }
    prepared_ = std::move(out);
    ready_ = true;
    return prepared_;
  }

  void load() const {
    if (!data_file_exists(info_.file))
      throw Error("task " + name() + ": data file " + (std::filesystem::path(data_dir()) / info_.file).string() + " not found; `mnemo data fetch recall` "
                  "downloads the recall sets (one Hugging Face row per line: " + info_.file + ")");
    file_ = load_data_file({info_.file, "", false, false,
                            "fetched by the user (hazyresearch's Hugging Face copy, validation split); not checked "
                            "against a reference copy"},
                           name());
    const bool skip = ctx_.skip_malformed;
    records_ = documents_from_records(parse_jsonl(file_.text, file_.file, /*keep_malformed=*/true), file_.file, skip,
                                      [this](const json& rec, const std::string& where, size_t) {
                                        validate(info_, rec, where);
                                        return rec;
                                      });
    if (records_.empty()) throw Error("task " + name() + ": " + file_.path + " holds no documents");
  }

  RecallTaskInfo info_;
  HarnessTaskContext ctx_;
  mutable std::mutex mu_;
  mutable bool ready_ = false;
  mutable std::vector<Document> records_;
  mutable std::vector<Prepared> prepared_;
  mutable LoadedFile file_;
};

}  // namespace

std::unique_ptr<HarnessTask> make_recall_task(const std::string& name) {
  for (const auto& i : recall_task_infos())
    if (i.name == name) return std::make_unique<RecallTask>(i);
  return nullptr;
}

}  // namespace mnemo::harness
