// The recall-intensive QA tasks (docs/tasks.md#recall-intensive-qa): one test per rule, parity with the reference's own outputs
// (tests/data/harness/recall/, made by scripts/parity/recall_reference.py from HazyResearch/prefix-linear-attention's
// lm-eval fork), the driver end to end with a scripted model, and bad data.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/model_adapter.h"
#include "runtime/model.h"
#include "tasks/harness/aggregation.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/harness/qa_metrics.h"
#include "tasks/harness/recall_tasks.h"
#include "tasks/harness/task_common.h"
#include "tasks/tokenizer.h"
#include "tests/file_util.h"
#include "test_util.h"

using namespace mnemo;
using namespace mnemo::harness;
namespace fs = std::filesystem;
using test::ScopedDataDir;

namespace {
const std::string kRecall = std::string(MNEMO_SOURCE_DIR) + "/tests/data/harness/recall/";



// A data directory holding the fixture's records as <dir>/eval/recall/<file>.jsonl.
fs::path fixture_data_dir(const std::string& name) {
  const fs::path dir = test::temp_dir(name);
  for (const auto& e : fs::directory_iterator(kRecall + "inputs"))
    test::write_text_file(dir / "eval" / "recall" / e.path().filename(), read_text_file(e.path().string()));
  return dir;
}

std::vector<json> jsonl(const std::string& text) {
  std::vector<json> out;
  for (auto& r : parse_jsonl(text, "fixture")) out.push_back(std::move(r.value));
  return out;
}

// The fixture keeps strings longer than 160 characters as {sha256, bytes, head, tail}.
bool same_text(const json& want, const std::string& got) {
  if (want.is_string()) return want.get<std::string>() == got;
  return want.at("sha256").get<std::string>() == sha256_hex(got) && want.at("bytes").get<size_t>() == got.size();
}
std::string show(const std::string& s) {
  return s.size() <= 200 ? s : s.substr(0, 100) + " [...] " + s.substr(s.size() - 100);
}

HarnessTaskContext context(const Tokenizer& tok, bool cut, int64_t context_length = 2048, int64_t answer_length = 48) {
  HarnessTaskContext c;
  c.tokenizer = &tok;
  c.add_bos = tok.adds_bos();
  c.cutting_context = cut;
  c.context_length = context_length;
  c.answer_length = answer_length;
  return c;
}
}  // namespace

// ---------------------------------------------------------------- rules

TEST_CASE("contains: any gold label as a case-insensitive literal substring (re.escape, IGNORECASE)", "[harness][recall]") {
  CHECK(contains_score("It was ACME pump.", {"acme Pump"}) == 1);
  CHECK(contains_score("K2xv", {"K(2).v*+?"}) == 0);               // metacharacters are literal
  CHECK(contains_score("see K(2).V*+? here", {"k(2).v*+?"}) == 1);
  CHECK(contains_score("axb", {"a.b"}) == 0);
  CHECK(contains_score("nothing", {"x", "noth"}) == 1);             // any label
  CHECK(contains_score("ÉTAT civil", {"état"}) == 1);               // Latin-1 folds
  CHECK(contains_score("", {""}) == 1);                              // "" matches everywhere
  CHECK_THROWS_AS(contains_score("x", {}), Error);                  // max() of nothing raises in the reference
  CHECK(find_ignore_case("caFé au lait", "AU") == 5);                // code points, not bytes
}

TEST_CASE("SQuAD v2 normalisation, exact and F1 are the official script's", "[harness][recall]") {
  CHECK(squad_normalize_answer("The  Cat, a dog!  An apple.") == "cat dog apple");
  CHECK(squad_normalize_answer("theatre anthem a") == "theatre anthem");
  CHECK(squad_exact("the Brothers Grimm", "Brothers grimm.") == 1);
  CHECK(squad_f1("in 1889", "maybe in 1889 and some more words here") == Approx(2.0 * (2.0 / 8) * 1.0 / (2.0 / 8 + 1.0)));
  CHECK(squad_f1("", "x") == 0);
  CHECK(squad_f1("a", "") == 1);  // both normalise to no tokens
  // Golds that normalise to nothing are dropped ([""] when none is left).
  CHECK(squad_v2_raw_scores({"the", ""}, "").exact == 1);
  CHECK(squad_v2_raw_scores({"Paris", "the"}, "paris").exact == 1);
}

TEST_CASE("squad_v2 aggregation keeps one score per id (the last document's), 0-100, stderr N/A", "[harness][recall]") {
  auto doc = [](const std::string& id, double exact, double na) {
    return json{{"id", id}, {"exact", exact}, {"f1", exact / 2}, {"has_ans", true}, {"no_answer_probability", na}};
  };
  const std::vector<json> v = {doc("1", 1, 0.1), doc("2", 0, 0.5), doc("1", 0, 0.2), doc("3", 1, 1.0)};
  CHECK(aggregate("squad_v2_exact", v) == Approx(100.0 * 1 / 3));  // id 1 scored by its second document
  CHECK(aggregate("squad_v2_f1", v) == Approx(100.0 * 0.5 / 3));
  CHECK(aggregate("squad_v2_exact", {doc("1", 1, 2.0)}) == 0);     // above the 1.0 threshold: not has_ans
  CHECK(std::isnan(aggregate_stderr("squad_v2_exact", v)));
  CHECK(aggregate("np_mean", {json(1), json(0), json(1)}) == Approx(2.0 / 3));
  CHECK(std::isnan(aggregate_stderr("np_mean", {json(1), json(0)})));  // numpy.mean: lm-eval has no stderr for it
}

TEST_CASE("recall prompts: FDA / SWDE key handling, SWDE marker, TriviaQA markers, NQ's case-sensitive single cut",
          "[harness][recall]") {
  json fda = {{"text", "\nBody text.. Name: Acme. name:NAME:"}, {"key", "name"}, {"value", "Acme"}};
  CHECK(recall_doc_to_text(RecallKind::fda, false, fda, "x") == "Body text.. Name: Acme. . Name:");
  CHECK(fda["text"] == "Body text.. Name: Acme. ");  // doc_to_text changes the document, as the reference's does
  json fda2 = {{"text", "Body"}, {"key", "name"}, {"value", "v"}};
  CHECK(recall_doc_to_text(RecallKind::fda, true, fda2, "x") == "Information about Name. Body.\nBody. Name:");
  json swde = {{"text", " Page. genre:Summary of information above... genre: drama"}, {"key", "genre"}, {"value", "drama"}};
  CHECK(recall_doc_to_text(RecallKind::swde, false, swde, "x") == "Page. Genre:");
  CHECK(swde["text"] == " Page. ");
  json tqa = {{"context", "[DOC] [TLE] T [PAR] Body. Who? WHO?"}, {"question", "who?"}, {"answers", {"a"}},
              {"orig_question", "Q:"}};
  CHECK(recall_doc_to_text(RecallKind::triviaqa, false, tqa, "x") == "T  Body. Who?. who?");
  CHECK(recall_doc_to_text(RecallKind::triviaqa, true, tqa, "x") == "Q: T  Body. Who?.\nT  Body. Who?. who?");
  json nq = {{"context", "Body. Who won? WHO WON?"}, {"question", "who won?"}, {"answers", {"a"}}, {"orig_question", "Q::"}};
  CHECK(recall_doc_to_text(RecallKind::nq, false, nq, "x") == "Body. Who won? WHO WON?. who won?");  // case-sensitive
  CHECK(recall_doc_to_text(RecallKind::nq, true, nq, "x") == "Q Body. Who won?.\nBody. Who won?. who won?");
  json empty_q = {{"context", "Body."}, {"question", " "}, {"answers", {"a"}}};
  CHECK(recall_doc_to_text(RecallKind::nq, false, empty_q, "x") == ". ");  // context[:-0] == "" in Python
  json no_key = {{"text", "t"}, {"key", ""}, {"value", "v"}};
  CHECK_THROWS_WITH(recall_doc_to_text(RecallKind::fda, false, no_key, "f.jsonl:3"),
                    Catch::Contains("f.jsonl:3") && Catch::Contains("'key'"));
}

TEST_CASE("truncate_context: skip rule, answer position, not found, alt_answers, tok_pos, BOS counted",
          "[harness][recall]") {
  ByteTokenizer bos(true), plain(false);
  const RecallCutKeys fda = recall_cut_keys(RecallKind::fda), nq = recall_cut_keys(RecallKind::nq);
  const std::string text = "0123456789ABCDEFGHIJ key: VALUE klmnopqrstuvwxyz";
  // desired 10 tokens; the answer "key" at character 21; BOS first: a = 22, start = 17, end = 27.
  CHECK(*recall_cut_context({{"text", text}, {"key", "key"}, {"value", "value"}}, fda, bos, true, 12, 2, "x") ==
        text.substr(16, 10));
  CHECK(*recall_cut_context({{"text", text}, {"key", "key"}, {"value", "value"}}, fda, plain, false, 12, 2, "x") ==
        text.substr(16, 10));
  // One-character or empty answer strings: skipped.
  CHECK_FALSE(recall_cut_context({{"text", text}, {"key", "k"}, {"value", "value"}}, fda, bos, true, 12, 2, "x"));
  CHECK_FALSE(recall_cut_context({{"text", text}, {"key", "key"}, {"value", ""}}, fda, bos, true, 12, 2, "x"));
  // Not found: the end of the document (context[:-1]).
  CHECK(*recall_cut_context({{"context", text}, {"answers", {"absent"}}}, nq, plain, false, 12, 2, "x") == text.substr(42));
  // Not found, alt_answers: the first one found places the cut.
  CHECK(*recall_cut_context({{"context", text}, {"answers", {"absent"}}, {"alt_answers", {"nope", "abc"}}}, nq, plain,
                            false, 12, 2, "x") == text.substr(5, 10));
  // Not found and past the budget: tok_pos, when the record has one.
  CHECK(*recall_cut_context({{"context", text}, {"answers", {"absent"}}, {"tok_pos", 8}}, nq, plain, false, 12, 2, "x") ==
        text.substr(3, 10));
  // TriviaQA / DROP: no answer key, the start of the context.
  CHECK(*recall_cut_context({{"context", text}}, recall_cut_keys(RecallKind::drop), bos, true, 12, 2, "x") ==
        text.substr(0, 9));
  CHECK_THROWS_WITH(recall_cut_context({{"text", text}, {"key", "key"}, {"value", "v1"}}, fda, bos, true, 48, 48, "x"),
                    Catch::Contains("--context-length"));
}

TEST_CASE("recall registry: the six tasks, their twice variants, the recall group in MoM Table 2's order",
          "[harness][recall]") {
  CHECK(expand_harness_tasks({"recall"}) ==
        std::vector<std::string>{"fda", "swde", "squad_completion", "nq", "triviaqa", "drop"});
  CHECK(expand_harness_tasks({"recall_twice"}).size() == 6);
  for (const auto& n : recall_task_names()) CHECK(make_harness_task(n)->name() == n);
  CHECK(make_harness_task("squad_completion")->metrics().size() == 3);
  CHECK(make_harness_task("nq_twice")->metrics().size() == 1);
  CHECK_THROWS_WITH(make_harness_task("fdaa"), Catch::Contains("fda"));
}

TEST_CASE("recall data: a missing file names the path and `mnemo data fetch recall`, bad records name file:line",
          "[harness][recall]") {
  const fs::path dir = test::temp_dir("recall_bad");
  ScopedDataDir scoped(dir);
  CHECK_THROWS_WITH(make_harness_task("nq_twice")->num_docs(),
                    Catch::Contains("eval/recall/nq.jsonl") && Catch::Contains("mnemo data fetch recall"));
  const std::string good = "{\"text\": \"t\", \"key\": \"k\", \"value\": \"v\"}\n";
  test::write_text_file(dir / "eval/recall/fda.jsonl", good + "{\"text\": \"t\", \"key\": 3, \"value\": \"v\"}\n");
  CHECK_THROWS_WITH(make_harness_task("fda")->num_docs(), Catch::Contains("eval/recall/fda.jsonl:2") && Catch::Contains("'key'"));
  test::write_text_file(dir / "eval/recall/fda.jsonl", good + "{not json\n");
  CHECK_THROWS_WITH(make_harness_task("fda")->num_docs(), Catch::Contains("eval/recall/fda.jsonl:2"));
  test::write_text_file(dir / "eval/recall/swde.jsonl", good);
  CHECK_THROWS_WITH(make_harness_task("swde")->num_docs(),
                    Catch::Contains("swde.jsonl:1") && Catch::Contains("Summary of information above..."));
  test::write_text_file(dir / "eval/recall/triviaqa.jsonl", "{\"context\": \"c\", \"question\": \"q\", \"answers\": []}\n");
  CHECK_THROWS_WITH(make_harness_task("triviaqa")->num_docs(), Catch::Contains("triviaqa.jsonl:1") && Catch::Contains("'answers'"));
  test::write_text_file(dir / "eval/recall/drop.jsonl", "{\"context\": \"c\", \"question\": \"q\", \"answers\": [\"a\"]}\n");
  CHECK(make_harness_task("drop")->num_docs() == 1);
  CHECK_THROWS_WITH(make_harness_task("drop_twice")->num_docs(), Catch::Contains("drop.jsonl:1") && Catch::Contains("'orig_question'"));
  const json files = make_harness_task("drop")->data_files();
  CHECK(files[0]["file"] == "eval/recall/drop.jsonl");
  CHECK(files[0]["matches_reference"] == false);
  CHECK(files[0]["sha256"].get<std::string>().size() == 64);
  CHECK(files[0]["note"].get<std::string>().find("not checked against a reference copy") != std::string::npos);
  // SQuAD's rows lack new_id (the reference needs it without cutting): the document's index stands in.
  test::write_text_file(dir / "eval/recall/squad_completion.jsonl", "{\"text\": \"a b\", \"value\": \"b\"}\n");
  CHECK(make_harness_task("squad_completion")->doc(0).at("new_id") == 0);
  mnemo::test::remove_dir_tree(dir);
}

// ---------------------------------------------------------------- parity with the reference's outputs

TEST_CASE("recall tasks equal the reference's prompts, cut contexts, requests, skips, contains and exact/F1",
          "[harness][recall]") {
  const json expected = json::parse(read_text_file(kRecall + "expected.json"));
  const fs::path dir = fixture_data_dir("recall_parity");
  ScopedDataDir scoped(dir);
  int64_t cases = 0;
  for (const auto& setting : expected.at("settings")) {
    const std::string sname = setting.at("name");
    ByteTokenizer tok(setting.at("bos").get<bool>());
    for (auto it = expected.at("tasks").begin(); it != expected.at("tasks").end(); ++it) {
      const std::string name = it.key();
      const json& want = it.value().at("settings").at(sname);
      const auto rows = jsonl(read_text_file(kRecall + "inputs/" + it.value().at("file").get<std::string>() + ".jsonl"));
      auto task = make_harness_task(name);
      task->configure(context(tok, setting.at("cutting_context"), setting.at("context_length"), setting.at("answer_length")));
      REQUIRE(task->num_docs() == static_cast<int64_t>(rows.size()));
      std::map<std::string, std::vector<json>> values;
      for (const auto& d : want.at("docs")) {
        const int64_t i = d.at("index");
        INFO(name << " / " << sname << " / document " << i);
        ++cases;
        const auto reqs = task->requests(i);
        if (d.at("skipped").get<bool>()) {
          CHECK(reqs.empty());
          continue;
        }
        REQUIRE(reqs.size() == d.at("requests").size());
        for (size_t k = 0; k < reqs.size(); ++k) {
          const json& w = d.at("requests")[k];
          CHECK(request_type_name(reqs[k].type) == w.at("type").get<std::string>());
          INFO("prompt: " << show(reqs[k].arguments[0]));
          CHECK(same_text(w.at("arguments")[0], reqs[k].arguments[0]));
          if (reqs[k].type == RequestType::generate_until) {
            CHECK(reqs[k].until == w.at("arguments")[1].at("until").get<std::vector<std::string>>());
            CHECK(reqs[k].max_gen_toks == w.at("arguments")[1].at("max_gen_toks").get<int64_t>());
          } else {
            CHECK(reqs[k].arguments[1] == w.at("arguments")[1].get<std::string>());
          }
        }
        // The document as the reference's process_results sees it: the record, changed as listed.
        const json doc = task->doc(i);
        json base = rows[static_cast<size_t>(i)];
        for (const auto& k : d.at("doc_removed")) base.erase(k.get<std::string>());
        for (auto f = d.at("doc_changed").begin(); f != d.at("doc_changed").end(); ++f) {
          INFO("field " << f.key());
          REQUIRE(doc.contains(f.key()));
          if (doc[f.key()].is_string()) CHECK(same_text(f.value(), doc[f.key()].get<std::string>()));
          else CHECK(doc[f.key()] == f.value());
          base[f.key()] = doc[f.key()];
        }
        CHECK(doc == base);
        CHECK(task->target(doc) == d.at("target").get<std::string>());
        std::vector<Response> resp(reqs.size());
        resp[0].text = d.at("generation").get<std::string>();
        if (resp.size() == 2) resp[1].ll = d.at("loglikelihood").get<double>();
        const json m = task->process_results(doc, resp);
        CHECK(m.at("contains") == d.at("contains"));
        if (!d.at("squad_prediction").is_null()) {
          const json& p = d.at("squad_prediction");
          CHECK(m.at("exact").at("id") == (p.at("id").is_string() ? p.at("id") : json(p.at("id").dump())));
          CHECK(m.at("exact").at("no_answer_probability").get<double>() == p.at("no_answer_probability").get<double>());
        }
        for (const auto& s : task->metrics()) values[s.name].push_back(m.at(s.name));
      }
      for (const auto& s : task->metrics()) {
        INFO(name << " / " << sname << " / " << s.name);
        const double got = aggregate(s.aggregation, values[s.name]), ref = want.at("aggregate").at(s.name);
        CHECK(std::fabs(got - ref) <= 1e-12 * std::max(1.0, std::fabs(ref)));
      }
    }
  }
  CHECK(cases == 352);
  mnemo::test::remove_dir_tree(dir);
}

// ---------------------------------------------------------------- the driver, end to end

namespace {
// Answers every generation with the same text and every loglikelihood with -1 (no forward pass).
class ScriptedModel : public EvalModel {
 public:
  std::string answer = "Acme Infusion Pump\nand then more";
  int64_t generations = 0;
  int64_t vocab_size() const override { return 258; }
  torch::Device device() const override { return torch::kCPU; }
  torch::Tensor logits(const torch::Tensor&) override { throw Error("not scripted"); }
  torch::Tensor next_token_logprobs(const torch::Tensor&, int64_t) override { throw Error("not scripted"); }
  std::vector<std::pair<double, bool>> loglikelihood_tokens(
      const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& r, int64_t, int64_t) override {
    return std::vector<std::pair<double, bool>>(r.size(), {-1.0, false});
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt, const GenerationRequest& g) override {
    ++generations;
    CHECK(static_cast<int64_t>(prompt.size()) <= 2048 - g.max_new_tokens);
    std::vector<int64_t> out;
    for (unsigned char c : answer) out.push_back(c);
    return out;
  }
};
}  // namespace

TEST_CASE("recall through run_harness: contains, exact/F1, skipped documents reported, requests-only",
          "[harness][recall]") {
  const fs::path dir = fixture_data_dir("recall_e2e");
  ScopedDataDir scoped(dir);
  ByteTokenizer tok;
  ScriptedModel model;
  HarnessOptions o;
  o.tasks = expand_harness_tasks({"fda,squad_completion"});
  o.max_length = 2048;
  o.log_samples = true;
  o.cutting_context = true;
  o.context_length = 64;
  o.answer_length = 16;
  o.output_path = (dir / "out").string();
  std::vector<EvalCell> cells;
  o.record = [&](const std::vector<EvalCell>& c) { cells.insert(cells.end(), c.begin(), c.end()); };
  std::vector<std::string> lines;
  const json out = run_harness(&model, tok, o, [&](const std::string& l) { lines.push_back(l); });
  const json& res = out.at("results");

  // FDA: records 3, 4, 5 have a one-character or empty key/value: skipped; the rest scored against the script.
  const auto fda_rows = jsonl(read_text_file(kRecall + "inputs/fda.jsonl"));
  double want = 0;
  for (size_t i = 0; i < fda_rows.size(); ++i)
    if (i < 3 || i > 5) want += contains_score("Acme Infusion Pump", {fda_rows[i]["value"].get<std::string>()});
  CHECK(res.at("results").at("fda").at("contains,none").get<double>() == Approx(want / 7));
  CHECK(res.at("results").at("fda").at("contains_stderr,none") == "N/A");
  CHECK(res.at("n-samples").at("fda") == json({{"original", 10}, {"effective", 10}, {"skipped", 3}}));
  CHECK(res.at("n-samples").at("squad_completion").at("skipped") == 2);
  CHECK(out.at("skipped") == json({{"fda", 3}, {"squad_completion", 2}}));
  CHECK(res.at("results").at("squad_completion").contains("exact,none"));
  CHECK(res.at("results").at("squad_completion").contains("f1,none"));
  CHECK(res.at("config").at("cutting_context") == true);
  CHECK(res.at("config").at("context_length") == 64);
  CHECK(res.at("versions").at("fda").is_number_integer());
  CHECK(res.at("versions").at("fda") == 0);
  CHECK(model.generations == 7 + 6);
  bool logged = false;
  for (const auto& l : lines) logged = logged || l.find("3 skipped") != std::string::npos;
  CHECK(logged);
  // Samples: the scored documents only, with their original index.
  std::vector<json> samples = jsonl(read_text_file((dir / "out" / "samples_fda.jsonl").string()));
  REQUIRE(samples.size() == 7);
  CHECK(samples[3].at("doc_id") == 6);
  CHECK(samples[0].at("doc").at("new_id") == 1);
  CHECK(samples[3].at("doc").at("new_id") == 4);  // build_all_requests counts the requests before it
  CHECK(samples[0].at("arguments").at("gen_args_0").at("arg_1").at("until") == json::array({"\n"}));
  CHECK(samples[0].at("resps")[0][0] == "Acme Infusion Pump");
  // Cells: n = the scored documents; the cut is part of the cell's setting.
  REQUIRE(cells.size() == 1 + 3);
  CHECK(cells[0].n == 7);
  CHECK(cells[0].details.at("docs_skipped") == 3);
  CHECK(cells[0].setting.at("cutting_context") == true);
  CHECK(cells[0].setting.at("answer_length") == 16);

  // Requests only: skipped documents write no line and are counted.
  HarnessOptions q = o;
  q.requests_only = true;
  q.tasks = {"fda"};
  q.output_path = (dir / "requests").string();
  const json rq = run_harness(nullptr, tok, q, {});
  CHECK(rq.at("skipped").at("fda") == 3);
  CHECK(rq.at("requests").at("fda") == 7);
  const auto req_lines = jsonl(read_text_file((dir / "requests" / "fda.jsonl").string()));
  REQUIRE(req_lines.size() == 7);
  CHECK(req_lines[3].at("doc_id") == 6);

  // Every document skipped: an Error, as the reference's assert.
  test::write_text_file(dir / "eval/recall/fda.jsonl", "{\"text\": \"t\", \"key\": \"k\", \"value\": \"v\"}\n");
  o.tasks = {"fda"};
  CHECK_THROWS_WITH(run_harness(&model, tok, o, {}), Catch::Contains("skipped"));
  o.cutting_context = true;
  o.context_length = 10;
  o.answer_length = 10;
  CHECK_THROWS_WITH(run_harness(&model, tok, o, {}), Catch::Contains("--context-length"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("recall on a tiny model: the driver's generation is greedy decoding of the truncated prompt, cut at the newline",
          "[harness][recall]") {
  const fs::path dir = fixture_data_dir("recall_tiny");
  ScopedDataDir scoped(dir);
  torch::manual_seed(0);
  LanguageModel model(model_config_from_json({{"model", "transformer"}, {"vocab_size", 258}, {"d_model", 32},
                                               {"n_layers", 2}, {"n_heads", 4}}));
  model->eval();
  LanguageModelAdapter adapter(*model, torch::kCPU);
  ByteTokenizer tok;
  HarnessOptions o;
  o.tasks = {"triviaqa"};
  o.limit = 3;
  o.max_length = 96;  // prompts keep their last 96 - 48 tokens
  o.log_samples = true;
  o.output_path = (dir / "out").string();
  const json out = run_harness(&adapter, tok, o, {});
  const double contains = out.at("results").at("results").at("triviaqa").at("contains,none");
  CHECK((contains >= 0 && contains <= 1));
  const auto samples = jsonl(read_text_file((dir / "out" / "samples_triviaqa.jsonl").string()));
  REQUIRE(samples.size() == 3);
  auto task = make_harness_task("triviaqa");
  for (int64_t d = 0; d < 3; ++d) {
    std::vector<int64_t> ids = tok.encode(task->requests(d)[0].arguments[0]);
    ids.insert(ids.begin(), tok.bos_id());
    ids.erase(ids.begin(), ids.end() - 48);
    GenerationRequest g;
    g.max_new_tokens = 48;
    g.stop_ids = {tok.eos_id()};
    std::string text = tok.decode(adapter.generate_greedy(ids, g));
    text = text.substr(0, text.find('\n'));
    CHECK(samples[static_cast<size_t>(d)].at("resps")[0][0] == text);
  }
  mnemo::test::remove_dir_tree(dir);
}
