// The lm-eval-parity driver: the loglikelihood primitive against a hand computation (one forward per
// request), right padding and order restoration, truncation to max_length, is_greedy; the driver's results.json,
// samples, table, requests-only files and evals cells with a test-only task; bad input.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/evaluation/harness_eval.h"
#include "engine/evaluation/model_adapter.h"
#include "runtime/model.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/task_registry.h"
#include "tasks/tokenizer.h"
#include "file_util.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

LanguageModel tiny_model(const std::string& family) {
  torch::manual_seed(0);
  LanguageModel m(model_config_from_json({{"model", family}, {"vocab_size", 258}, {"d_model", 32}, {"n_layers", 2},
                                          {"n_heads", 4}, {"chunk_size", 4}}));
  m->eval();
  return m;
}

// lm-eval's arithmetic written out for one request alone: inp = (ctx + cont)[-(L+1):][:-1], one forward,
// log_softmax, the last len(cont) positions.
std::pair<double, bool> hand(LanguageModelImpl& m, const TokenPair& r, int64_t max_length) {
  torch::NoGradGuard ng;
  std::vector<int64_t> full = r.first;
  full.insert(full.end(), r.second.begin(), r.second.end());
  if (static_cast<int64_t>(full.size()) > max_length + 1) full.erase(full.begin(), full.end() - (max_length + 1));
  std::vector<int64_t> inp(full.begin(), full.end() - 1);
  auto ids = torch::tensor(inp, torch::kInt64).unsqueeze(0);
  auto lp = torch::log_softmax(m.forward(ids)[0], -1);
  double ll = 0;
  bool greedy = true;
  const int64_t n = static_cast<int64_t>(inp.size()), c = static_cast<int64_t>(r.second.size());
  for (int64_t k = 0; k < c; ++k) {
    ll += lp[n - c + k][r.second[k]].item<double>();
    greedy = greedy && lp[n - c + k].argmax().item<int64_t>() == r.second[k];
  }
  return {ll, greedy};
}

std::vector<TokenPair> random_requests(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<TokenPair> out;
  for (int i = 0; i < n; ++i) {
    TokenPair r;
    const int lc = 1 + static_cast<int>(g() % 20), lk = 1 + static_cast<int>(g() % 6);
    for (int j = 0; j < lc; ++j) r.first.push_back(static_cast<int64_t>(g() % 258));
    for (int j = 0; j < lk; ++j) r.second.push_back(static_cast<int64_t>(g() % 258));
    out.push_back(r);
  }
  return out;
}

std::vector<int64_t> bytes_of(const std::string& s) {
  std::vector<int64_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

// Two documents, two choices each; acc by the larger loglikelihood.
class TwoChoiceTask : public harness::HarnessTask {
 public:
  static json docs() {
    return json::array({{{"query", "Question: Is the sky blue?\nAnswer:"}, {"choices", {"yes", "no"}}, {"gold", 0}},
                        {{"query", "Question: 2 + 2?\nAnswer:"}, {"choices", {"4", "five"}}, {"gold", 1}}});
  }
  std::string name() const override { return "test_two_choice"; }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "multiple_choice"; }
  std::vector<harness::MetricSpec> metrics() const override { return {{"acc", "mean", true}}; }
  int64_t num_docs() const override { return 2; }
  json doc(int64_t d) const override { return docs()[static_cast<size_t>(d)]; }
  std::string target(const json& doc) const override { return std::to_string(doc["gold"].get<int>()); }
  std::vector<harness::Request> requests(int64_t d) const override {
    const json dd = doc(d);
    std::vector<harness::Request> out;
    for (int i = 0; i < 2; ++i) {
      harness::Request r;
      r.type = harness::RequestType::loglikelihood;
      r.arguments = {dd["query"].get<std::string>(), " " + dd["choices"][i].get<std::string>()};
      r.doc_id = d;
      r.idx = i;
      out.push_back(r);
    }
    return out;
  }
  json process_results(const json& doc, const std::vector<harness::Response>& rs) const override {
    const int best = rs[1].ll > rs[0].ll ? 1 : 0;
    return {{"acc", best == doc["gold"].get<int>() ? 1.0 : 0.0}};
  }
  json data_files() const override {
    return json::array({{{"file", "test.jsonl"}, {"sha256", "00"}, {"matches_reference", true}, {"note", ""}}});
  }
};

// One rolling document (WikiText-like); its ll is the sum over the rolling windows.
class RollingTask : public TwoChoiceTask {
 public:
  static std::string text() { return "The quick brown fox jumps over the lazy dog, twice over."; }
  std::string name() const override { return "test_rolling"; }
  std::string output_type() const override { return "loglikelihood_rolling"; }
  std::vector<harness::MetricSpec> metrics() const override { return {{"ll", "mean", true}}; }
  int64_t num_docs() const override { return 1; }
  json doc(int64_t) const override { return {{"page", text()}}; }
  std::string target(const json&) const override { return text(); }
  std::vector<harness::Request> requests(int64_t d) const override {
    harness::Request r;
    r.type = harness::RequestType::loglikelihood_rolling;
    r.arguments = {text()};
    r.doc_id = d;
    return {r};
  }
  json process_results(const json&, const std::vector<harness::Response>& rs) const override {
    return {{"ll", rs[0].ll}};
  }
};

std::unique_ptr<harness::HarnessTask> test_tasks(const std::string& name) {
  if (name == "test_two_choice") return std::make_unique<TwoChoiceTask>();
  if (name == "test_rolling") return std::make_unique<RollingTask>();
  return harness::make_harness_task(name);
}

}  // namespace

TEST_CASE("loglikelihood_order is lm-eval's Collator order: longest first, ties by the tokens", "[harness]") {
  std::vector<TokenPair> r = {{{5}, {1}}, {{1, 2}, {3}}, {{1, 2, 3}, {4}}, {{1, 1}, {9}}, {{5}, {1}}};
  const auto o = loglikelihood_order(r);
  CHECK(o == std::vector<size_t>{2, 3, 1, 0, 4});
}

TEST_CASE("loglikelihood_tokens equals one forward per request, padding, order, truncation, is_greedy (fp64)",
          "[harness]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  for (const std::string family : {"transformer", "gated_deltanet"}) {
    INFO(family);
    auto model = tiny_model(family);
    LanguageModelAdapter adapter(*model, torch::kCPU);
    const auto reqs = random_requests(13, 7);
    for (int64_t max_length : {int64_t{2048}, int64_t{9}}) {
      INFO("max_length " << max_length);
      const auto b1 = adapter.loglikelihood_tokens(reqs, 1, max_length);
      const auto b5 = adapter.loglikelihood_tokens(reqs, 5, max_length);
      REQUIRE(b1.size() == reqs.size());
      REQUIRE(b5.size() == reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i) {
        const auto h = hand(*model, reqs[i], max_length);
        CHECK(b1[i].first == Approx(h.first).margin(1e-9));
        CHECK(b5[i].first == Approx(h.first).margin(1e-9));
        CHECK(b1[i].second == h.second);
        CHECK(b5[i].second == h.second);
      }
    }
    // Truncation really happens: a request longer than max_length + 1 differs from its untruncated value.
    const TokenPair longer = {std::vector<int64_t>(30, 65), {66, 67}};
    const auto full = adapter.loglikelihood_tokens({longer}, 1, 2048)[0].first;
    const auto cut = adapter.loglikelihood_tokens({longer}, 1, 4)[0].first;
    CHECK(cut == Approx(hand(*model, {std::vector<int64_t>(3, 65), {66, 67}}, 2048).first).margin(1e-9));
    CHECK(full == Approx(hand(*model, longer, 2048).first).margin(1e-9));
    // is_greedy: a continuation of the argmax tokens is greedy; change its last token and it is not.
    std::vector<int64_t> ctx = {72, 101, 108, 108, 111};
    std::vector<int64_t> cont;
    {
      torch::NoGradGuard ng;
      std::vector<int64_t> seq = ctx;
      for (int k = 0; k < 3; ++k) {
        auto logits = model->forward(torch::tensor(seq, torch::kInt64).unsqueeze(0))[0];
        seq.push_back(logits[-1].argmax().item<int64_t>());
        cont.push_back(seq.back());
      }
    }
    auto other = cont;
    other.back() = (other.back() + 1) % 258;
    const auto g = adapter.loglikelihood_tokens({{ctx, cont}, {ctx, other}}, 2, 2048);
    CHECK(g[0].second);
    CHECK_FALSE(g[1].second);
    CHECK(g[0].first > g[1].first);
    // Bad requests are Errors naming them.
    CHECK_THROWS_AS(adapter.loglikelihood_tokens({{{}, {1}}}, 1, 16), Error);
    CHECK_THROWS_AS(adapter.loglikelihood_tokens({{{1}, {}}}, 1, 16), Error);
    CHECK_THROWS_AS(adapter.loglikelihood_tokens({{{1}, {1, 2, 3}}}, 1, 2), Error);
    CHECK_THROWS_AS(adapter.loglikelihood_tokens({{{1}, {258}}}, 1, 16), Error);
  }
}

TEST_CASE("harness driver: results.json, samples, table, evals cells, requests-only files", "[harness]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  auto model = tiny_model("transformer");
  LanguageModelAdapter adapter(*model, torch::kCPU);
  ByteTokenizer tok;
  const auto dir = test::temp_dir("harness_eval");
  HarnessOptions o;
  o.tasks = {"test_two_choice", "test_rolling"};
  o.batch_size = 3;
  o.max_length = 16;
  o.log_samples = true;
  o.output_path = (dir / "out").string();
  o.model_name = "transformer";
  o.checkpoint = "ckpt";
  o.make_task = test_tasks;
  std::vector<EvalCell> cells;
  o.record = [&](const std::vector<EvalCell>& c) { cells.insert(cells.end(), c.begin(), c.end()); };
  std::vector<std::string> lines;
  const json out = run_harness(&adapter, tok, o, [&](const std::string& l) { lines.push_back(l); });

  // Expected values by hand: byte tokens, BOS first (the byte tokenizer has one), the continuation's bytes.
  const json docs = TwoChoiceTask::docs();
  std::vector<std::vector<double>> ll(2);
  std::vector<double> acc;
  for (int d = 0; d < 2; ++d) {
    std::vector<int64_t> ctx = {tok.bos_id()};
    for (auto b : bytes_of(docs[d]["query"].get<std::string>())) ctx.push_back(b);
    for (int i = 0; i < 2; ++i) ll[d].push_back(hand(*model, {ctx, bytes_of(" " + docs[d]["choices"][i].get<std::string>())}, 16).first);
    acc.push_back((ll[d][1] > ll[d][0] ? 1 : 0) == docs[d]["gold"].get<int>() ? 1.0 : 0.0);
  }
  const json& res = out.at("results");
  const json& r = res.at("results").at("test_two_choice");
  CHECK(r.at("alias") == "test_two_choice");
  CHECK(r.at("acc,none").get<double>() == Approx((acc[0] + acc[1]) / 2));
  const double m = (acc[0] + acc[1]) / 2;
  const double se = std::sqrt(((acc[0] - m) * (acc[0] - m) + (acc[1] - m) * (acc[1] - m)) / 1.0) / std::sqrt(2.0);
  CHECK(r.at("acc_stderr,none").get<double>() == Approx(se).margin(1e-12));
  CHECK(res.at("versions").at("test_two_choice") == 1.0);
  CHECK(res.at("n-shot").at("test_two_choice") == 0);
  CHECK(res.at("n-samples").at("test_two_choice") == json({{"original", 2}, {"effective", 2}, {"skipped", 0}}));
  CHECK(res.at("higher_is_better").at("test_two_choice").at("acc") == true);
  const json& cfg = res.at("config");
  CHECK(cfg.at("model") == "transformer");
  CHECK(cfg.at("checkpoint") == "ckpt");
  CHECK(cfg.at("tokenizer") == "byte");
  CHECK(cfg.at("add_bos") == true);
  CHECK(cfg.at("max_length") == 16);
  CHECK(cfg.at("limit").is_null());
  CHECK(cfg.at("batch_size") == 3);
  CHECK(res.at("data_files").at("test_two_choice")[0].at("matches_reference") == true);
  // results.json on disk equals the returned one.
  CHECK(json::parse(read_text_file((dir / "out" / "results.json").string())).at("results") == res.at("results"));

  // Rolling: the sum over lm-eval's windows (max_length 16, one token of context), each its own request.
  {
    const auto t = bytes_of(RollingTask::text());
    const int64_t L = 16, n = static_cast<int64_t>(t.size());
    double want = hand(*model, {{tok.bos_id()}, {t.begin(), t.begin() + std::min(L, n)}}, L).first;
    for (int64_t s = std::min(L, n); s < n;) {
      const int64_t e = std::min(n, s + L);
      want += hand(*model, {{t.begin() + std::max<int64_t>(0, e - L - 1), t.begin() + s}, {t.begin() + s, t.begin() + e}}, L).first;
      s = e;
    }
    CHECK(res.at("results").at("test_rolling").at("ll,none").get<double>() == Approx(want).margin(1e-8));
  }

  // Samples: lm-eval's saved schema (gen_args_i/arg_j, stringified resps).
  const auto samples = test::read_jsonl(dir / "out" / "samples_test_two_choice.jsonl");
  REQUIRE(samples.size() == 2);
  for (int d = 0; d < 2; ++d) {
    const json& s = samples[d];
    CHECK(s.at("doc_id") == d);
    CHECK(s.at("doc") == docs[d]);
    CHECK(s.at("target") == std::to_string(docs[d]["gold"].get<int>()));
    CHECK(s.at("arguments").at("gen_args_1").at("arg_0") == docs[d]["query"]);
    CHECK(s.at("arguments").at("gen_args_1").at("arg_1") == " " + docs[d]["choices"][1].get<std::string>());
    for (int i = 0; i < 2; ++i) {
      CHECK(std::stod(s.at("resps")[i][0][0].get<std::string>()) == Approx(ll[d][i]).margin(1e-9));
      CHECK(s.at("filtered_resps")[i] == s.at("resps")[i][0]);
      const std::string g = s.at("resps")[i][0][1];
      CHECK((g == "True" || g == "False"));
    }
    CHECK(s.at("filter") == "none");
    CHECK(s.at("metrics") == json::array({"acc"}));
    CHECK(s.at("acc") == acc[d]);
    CHECK(s.at("prompt_hash") == sha256_hex(docs[d]["query"].get<std::string>()));
    CHECK(s.contains("doc_hash"));
    CHECK(s.contains("target_hash"));
  }

  // Table (lm-eval make_table) and evals cells.
  const std::string table = out.at("table");
  CHECK(table.find("|Version|Filter|n-shot|") != std::string::npos);
  CHECK(table.find("|------:|------|-----:|") != std::string::npos);
  CHECK(table.find("test_two_choice") != std::string::npos);
  CHECK(table.find("|acc   |↑  |") != std::string::npos);
  CHECK(table.find("±") != std::string::npos);
  REQUIRE(cells.size() == 2);
  CHECK(cells[0].task == "test_two_choice");
  CHECK(cells[0].metric == "acc");
  CHECK(cells[0].n == 2);
  CHECK(cells[0].value == Approx(m));
  CHECK(cells[0].setting == json({{"suite", "lm-eval"}, {"num_fewshot", 0}, {"limit", nullptr}, {"max_length", 16},
                                  {"add_bos", true}, {"version", "1.0"}}));
  CHECK(cells[0].details.at("tokenizer") == "byte");
  CHECK(cells[0].details.at("requests") == 4);
  CHECK(cells[0].details.at("batch_size") == 3);
  CHECK(cells[0].details.contains("wall_s"));
  CHECK(cells[0].details.contains("stderr"));
  CHECK(cells[0].details.contains("data_files"));
  bool progress = false;
  for (const auto& l : lines) progress = progress || (l.find("requests/s") != std::string::npos && l.find("ETA") != std::string::npos);
  CHECK(progress);

  // Requests only: no model, one line per document with lm-eval's arguments.
  HarnessOptions q = o;
  q.requests_only = true;
  q.limit = 1;
  q.output_path = (dir / "requests").string();
  const json rq = run_harness(nullptr, tok, q, {});
  CHECK(rq.at("requests").at("test_two_choice") == 2);
  const auto req_lines = test::read_jsonl(dir / "requests" / "test_two_choice.jsonl");
  REQUIRE(req_lines.size() == 1);
  const json want_args = json::array({json::array({docs[0]["query"], " yes"}), json::array({docs[0]["query"], " no"})});
  CHECK(req_lines[0].at("doc_id") == 0);
  CHECK(req_lines[0].at("arguments") == want_args);
  const auto roll_lines = test::read_jsonl(dir / "requests" / "test_rolling.jsonl");
  REQUIRE(roll_lines.size() == 1);
  CHECK(roll_lines[0].at("arguments") == json::array({json::array({RollingTask::text()})}));
}

TEST_CASE("harness driver: --limit <= 0, an unknown task and a vocabulary mismatch are Errors", "[harness]") {
  auto model = tiny_model("transformer");
  LanguageModelAdapter adapter(*model, torch::kCPU);
  ByteTokenizer tok;
  const auto dir = test::temp_dir("harness_bad");
  HarnessOptions o;
  o.tasks = {"test_two_choice"};
  o.output_path = dir.string();
  o.make_task = test_tasks;
  for (int64_t bad : {int64_t{0}, int64_t{-3}}) {
    o.limit = bad;
    CHECK_THROWS_WITH(run_harness(&adapter, tok, o, {}), Catch::Contains("--limit"));
    HarnessOptions q = o;
    q.requests_only = true;
    CHECK_THROWS_AS(run_harness(nullptr, tok, q, {}), Error);
  }
  o.limit.reset();
  o.tasks = {"test_two_choice", "no_such_task_xyz"};
  CHECK_THROWS_AS(run_harness(&adapter, tok, o, {}), Error);
  CHECK_FALSE(fs::exists(dir / "results.json"));  // nothing ran
  o.tasks = {"test_two_choice"};
  ByteTokenizer plain(false);
  CHECK_THROWS_WITH(run_harness(&adapter, plain, o, {}), Catch::Contains("258") && Catch::Contains("256"));
}
