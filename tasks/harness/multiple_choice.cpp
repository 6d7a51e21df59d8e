// The generic multiple-choice task, driven by a JSON spec (tasks/harness/task_specs.cpp): lm-eval's
// ConfigurableTask for output_type multiple_choice, zero-shot (lm_eval/api/task.py doc_to_text, doc_to_choice,
// doc_to_target, construct_requests: one loglikelihood(ctx, target_delimiter + choice) per choice;
// process_results: acc / acc_norm).
#include <cctype>
#include <mutex>

#include "tasks/harness/py_compat.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

namespace {

// ---- A small subset of lm-eval's Jinja templates: {{ path }} with .field, ['field'], [index] and a final
// .strip(); the value must be a string or an integer (rendered as Jinja renders them).
json resolve_path(const json& doc, const std::string& expr, const std::string& where, bool* strip_call) {
  std::string e = py::strip(expr);
  if (strip_call) {
    *strip_call = e.size() > 8 && e.compare(e.size() - 8, 8, ".strip()") == 0;
    if (*strip_call) e = py::strip(e.substr(0, e.size() - 8));
  }
  const json* cur = &doc;
  size_t i = 0;
  auto fail = [&](const std::string& why) -> Error { return Error(where + ": template field '" + e + "': " + why); };
  auto ident = [&]() {
    const size_t b = i;
    while (i < e.size() && (std::isalnum(static_cast<unsigned char>(e[i])) || e[i] == '_')) ++i;
    if (i == b) throw fail("expected a field name at offset " + std::to_string(b));
    return e.substr(b, i - b);
  };
  auto member = [&](const std::string& name) {
    if (!cur->is_object() || !cur->contains(name)) throw fail("field '" + name + "' missing");
    cur = &(*cur)[name];
  };
  member(ident());
  while (i < e.size()) {
    if (e[i] == '.') {
      ++i;
      member(ident());
    } else if (e[i] == '[') {
      const size_t close = e.find(']', i);
      if (close == std::string::npos) throw fail("unclosed '['");
      const std::string key = py::strip(e.substr(i + 1, close - i - 1));
      i = close + 1;
      if (key.size() >= 2 && (key[0] == '\'' || key[0] == '"') && key.back() == key[0]) {
        member(key.substr(1, key.size() - 2));
      } else if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
        const size_t k = std::stoul(key);
        if (!cur->is_array() || k >= cur->size()) throw fail("index " + key + " out of range");
        cur = &(*cur)[k];
      } else {
        throw fail("unsupported subscript [" + key + "]");
      }
    } else {
      throw fail("unsupported syntax at offset " + std::to_string(i));
    }
  }
  return *cur;
}

std::string render(const std::string& tmpl, const json& doc, const std::string& where) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = tmpl.find("{{", pos);
    if (open == std::string::npos) break;
    const size_t close = tmpl.find("}}", open + 2);
    if (close == std::string::npos) throw Error("template '" + tmpl + "': unclosed '{{'");
    out.append(tmpl, pos, open - pos);
    bool strip_call = false;
    const json v = resolve_path(doc, tmpl.substr(open + 2, close - open - 2), where, &strip_call);
    std::string s;
    if (v.is_string()) s = v.get<std::string>();
    else if (v.is_number_integer()) s = v.dump();
    else throw Error(where + ": template '" + tmpl + "': value " + json_excerpt(v) + " is not a string or an integer");
    out += strip_call ? py::strip(s) : s;
    pos = close + 2;
  }
  return out.append(tmpl, pos, std::string::npos);
}

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

const json& spec_field(const json& spec, const std::string& field) {
  if (!spec.contains(field))
    throw Error("task spec " + spec.value("task", std::string("?")) + ": field '" + field + "' missing");
  return spec[field];
}

class SpecTask : public HarnessTask {
 public:
  explicit SpecTask(json spec) : spec_(std::move(spec)) {
    name_ = spec_field(spec_, "task").get<std::string>();
    for (const char* f : {"version", "sources", "doc_to_text", "doc_to_choice", "doc_to_target", "metrics"})
      spec_field(spec_, f);
    for (const auto& m : spec_["metrics"]) metrics_.push_back({m.get<std::string>(), "mean", true});
  }
  std::string name() const override { return name_; }
  std::string version() const override { return spec_["version"].get<std::string>(); }
  std::string output_type() const override { return "multiple_choice"; }
  std::vector<MetricSpec> metrics() const override { return metrics_; }
  int64_t num_docs() const override { return static_cast<int64_t>(docs().size()); }
  json doc(int64_t doc_id) const override { return at(doc_id).doc; }
  json data_files() const override {
    load();
    json out = json::array();
    for (const auto& f : files_) out.push_back(f.entry());
    return out;
  }
  void configure(const HarnessTaskContext& ctx) override { skip_malformed_ = ctx.skip_malformed; }
  std::vector<MalformedRecord> malformed_records() const override { return malformed_records_of(docs()); }

  std::string target(const json& doc) const override {
    const std::string where = name_ + " document";
    const std::string t = render(spec_["doc_to_target"].get<std::string>(), doc, where);
    if (spec_.contains("target_in") || all_digits(t)) return std::to_string(gold(doc, where));
    return t;
  }

  std::vector<Request> requests(int64_t doc_id) const override {
    const Document& d = at(doc_id);
    const std::string ctx = render(spec_["doc_to_text"].get<std::string>(), d.doc, d.where);
    const std::string delim = spec_.value("target_delimiter", std::string(" "));
    std::vector<Request> out;
    const auto cs = choices(d.doc, d.where);
    for (size_t i = 0; i < cs.size(); ++i) {
      Request r;
      r.type = RequestType::loglikelihood;
      r.arguments = {ctx, delim + cs[i]};
      r.doc_id = doc_id;
      r.idx = static_cast<int64_t>(i);
      out.push_back(std::move(r));
    }
    return out;
  }

  json process_results(const json& doc, const std::vector<Response>& responses) const override {
    const std::string where = name_ + " document";
    return multiple_choice_results(choices(doc, where), gold(doc, where), responses, metrics_, name_);
  }

 private:
  json spec_;
  std::string name_;
  std::vector<MetricSpec> metrics_;
  bool skip_malformed_ = false;
  mutable std::once_flag once_;
  mutable std::vector<Document> docs_;
  mutable std::vector<LoadedFile> files_;

  static DataSource source_of(const json& s) {
    DataSource d;
    d.file = s.at("file").get<std::string>();
    d.sha256 = s.value("sha256", std::string());
    d.checksum_required = s.value("checksum", std::string("required")) == "required";
    d.matches_reference = s.value("matches_reference", true);
    d.note = s.value("note", std::string());
    return d;
  }

  void load() const {
    std::call_once(once_, [this] {
      const json& sources = spec_["sources"];
      for (size_t i = 0; i < sources.size(); ++i) {
        const json& s = sources[i];
        const bool last = i + 1 == sources.size();
        if (s.value("optional", false) && !last && !data_file_exists(s.at("file").get<std::string>())) continue;
        std::vector<LoadedFile> files{load_data_file(source_of(s), name_, skip_malformed_)};
        if (s.contains("labels")) {
          DataSource lab = source_of(s["labels"]);
          lab.matches_reference = files[0].matches_reference;
          files.push_back(load_data_file(lab, name_, skip_malformed_));
        }
        auto docs = import_documents(s.at("format").get<std::string>(), files[0], files.size() > 1 ? &files[1] : nullptr,
                                     name_, skip_malformed_);
        if (docs.empty()) throw Error("task " + name_ + ": " + files[0].path + " holds no documents");
        // The templates on every document now, so that a record they cannot read is malformed here (file:line).
        check_documents(docs, skip_malformed_, [this](const Document& d) {
          render(spec_["doc_to_text"].get<std::string>(), d.doc, d.where);
          choices(d.doc, d.where);
          gold(d.doc, d.where);
        });
        docs_ = std::move(docs);
        files_ = std::move(files);
        return;
      }
      throw Error("task spec " + name_ + ": no data sources");
    });
  }

  const std::vector<Document>& docs() const {
    load();
    return docs_;
  }

  const Document& at(int64_t doc_id) const { return document_at(docs(), doc_id, name_); }

  std::vector<std::string> choices(const json& doc, const std::string& where) const {
    const json& c = spec_["doc_to_choice"];
    std::vector<std::string> out;
    if (c.is_string()) {  // a path to an array of strings
      const json v = resolve_path(doc, c.get<std::string>(), where, nullptr);
      if (!v.is_array() || v.empty()) throw Error(where + ": '" + c.get<std::string>() + "' is not a non-empty list");
      for (const auto& x : v) {
        if (!x.is_string()) throw Error(where + ": choice " + json_excerpt(x) + " is not a string");
        out.push_back(x.get<std::string>());
      }
    } else {
      for (const auto& t : c) out.push_back(render(t.get<std::string>(), doc, where));
    }
    return out;
  }

  // lm-eval doc_to_target + process_results: a digit string is the choice index (ast.literal_eval); another
  // string is looked up among the choices (choices.index, -100 when absent).
  int64_t gold(const json& doc, const std::string& where) const {
    const std::string t = render(spec_["doc_to_target"].get<std::string>(), doc, where);
    if (spec_.contains("target_in")) {  // e.g. ARC's choices.label.index(answerKey)
      const json labels = resolve_path(doc, spec_["target_in"].get<std::string>(), where, nullptr);
      for (size_t i = 0; i < labels.size(); ++i)
        if (labels[i].is_string() && labels[i].get<std::string>() == t) return static_cast<int64_t>(i);
      throw Error(where + ": target '" + t + "' is not in " + spec_["target_in"].get<std::string>());
    }
    if (all_digits(t)) return (t.size() > 9 ? -100 : std::stoll(t)) + spec_.value("target_offset", int64_t{0});
    const auto cs = choices(doc, where);
    for (size_t i = 0; i < cs.size(); ++i)
      if (cs[i] == t) return static_cast<int64_t>(i);
    return -100;
  }
};

}  // namespace

std::vector<std::string> spec_task_names() {
  std::vector<std::string> names;
  for (const TaskSpecFile& f : task_spec_files()) names.push_back(f.spec.at("task").get<std::string>());
  return names;
}

std::unique_ptr<HarnessTask> make_spec_task(const std::string& name) {
  for (TaskSpecFile& f : task_spec_files())
    if (f.spec.at("task").get<std::string>() == name) return std::make_unique<SpecTask>(std::move(f.spec));
  return nullptr;
}

}  // namespace mnemo::harness
