// S-NIAH and BABILong on the shared generate_until (engine/generate_until.h, engine/evaluate.h
// evaluate_generation_task): the cells, samples and predictions equal those of the per-task loop they replaced
// (fp64 tiny model), and generate_until's own rules (BOS, truncation, stop strings, EOS) on a scripted model.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>

#include "engine/evaluate.h"
#include "engine/generate_until.h"
#include "engine/model_adapter.h"
#include "runtime/model.h"
#include "tasks/babilong.h"
#include "tasks/scoring.h"
#include "tasks/sniah.h"
#include "test_util.h"

using namespace mnemo;

namespace {

struct DefaultDtype {
  explicit DefaultDtype(caffe2::TypeMeta t) : saved(torch::get_default_dtype()) { torch::set_default_dtype(t); }
  ~DefaultDtype() { torch::set_default_dtype(saved); }
  caffe2::TypeMeta saved;
};

LanguageModel tiny_model(const std::string& family) {
  torch::manual_seed(3);
  LanguageModel m(model_config_from_json({{"model", family}, {"vocab_size", 258}, {"d_model", 32}, {"n_layers", 2},
                                          {"n_heads", 2}, {"chunk_size", 8}}));
  m->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.mul_(4);  // a sharper random model: varied greedy outputs, not one repeated token
  return m;
}

// A model that answers with a fixed script of tokens, following runtime/generation.cpp's loop (a stop id ends it
// and is dropped; should_stop is asked after each token), and records the prompt it was given.
class ScriptedModel : public EvalModel {
 public:
  explicit ScriptedModel(std::vector<int64_t> script) : script_(std::move(script)) {}
  int64_t vocab_size() const override { return 258; }
  torch::Device device() const override { return torch::kCPU; }
  torch::Tensor logits(const torch::Tensor&) override { throw Error("not scripted"); }
  torch::Tensor next_token_logprobs(const torch::Tensor&, int64_t) override { throw Error("not scripted"); }
  std::vector<std::pair<double, bool>> loglikelihood_tokens(const std::vector<TokenPair>&, int64_t, int64_t) override {
    throw Error("not scripted");
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt, const GenerationRequest& r) override {
    prompts.push_back(prompt);
    std::vector<int64_t> out;
    for (size_t i = 0; i < script_.size() && static_cast<int64_t>(out.size()) < r.max_new_tokens; ++i) {
      if (std::find(r.stop_ids.begin(), r.stop_ids.end(), script_[i]) != r.stop_ids.end()) break;
      out.push_back(script_[i]);
      if (r.should_stop && r.should_stop(out)) break;
    }
    emitted.push_back(out.size());
    return out;
  }
  std::vector<std::vector<int64_t>> prompts;
  std::vector<size_t> emitted;

 private:
  std::vector<int64_t> script_;
};

// A byte-level model that reads the prompt and answers like a partly trained one, so that scores of 1 and 0, stop
// strings and EOS all occur: S-NIAH prompts get the needle's value (or a wrong one) with trailing text, BABILong
// prompts a location word followed by ".", "\n" or EOS.
class OracleModel : public EvalModel {
 public:
  int64_t vocab_size() const override { return 258; }
  torch::Device device() const override { return torch::kCPU; }
  torch::Tensor logits(const torch::Tensor&) override { throw Error("not scripted"); }
  torch::Tensor next_token_logprobs(const torch::Tensor&, int64_t) override { throw Error("not scripted"); }
  std::vector<std::pair<double, bool>> loglikelihood_tokens(const std::vector<TokenPair>&, int64_t, int64_t) override {
    throw Error("not scripted");
  }
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt, const GenerationRequest& r) override {
    std::string text;
    for (int64_t id : prompt)
      if (id < 256) text.push_back(static_cast<char>(id));
    const size_t h = std::hash<std::string>()(text);
    std::string answer;
    if (const size_t at = text.rfind(" is: "); at != std::string::npos) {  // the S-NIAH needle
      const std::string value = text.substr(at + 5, text.find('.', at) - at - 5);
      answer = h % 3 == 0 ? " 1234567\n" : " " + value + ".\n\x01 and more";
    } else {
      const char* words[] = {" kitchen.", " garden\nQuestion", " office", " hallway, bedroom"};
      answer = words[h % 4];
    }
    std::vector<int64_t> script;
    for (unsigned char c : answer) script.push_back(c);
    if (h % 2 == 0) script.push_back(257);  // EOS
    for (unsigned char c : std::string(" trailing text")) script.push_back(c);
    std::vector<int64_t> out;
    for (size_t i = 0; i < script.size() && static_cast<int64_t>(out.size()) < r.max_new_tokens; ++i) {
      if (std::find(r.stop_ids.begin(), r.stop_ids.end(), script[i]) != r.stop_ids.end()) break;
      out.push_back(script[i]);
      if (r.should_stop && r.should_stop(out)) break;
    }
    return out;
  }
};

std::vector<int64_t> bytes_of(const std::string& s) {
  std::vector<int64_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

harness::Request gen_request(const std::string& context, std::vector<std::string> until, int64_t max_gen_toks) {
  harness::Request r;
  r.type = harness::RequestType::generate_until;
  r.arguments = {context};
  r.until = std::move(until);
  r.max_gen_toks = max_gen_toks;
  return r;
}

struct Recorded {
  json out;
  json details = json::array();
};

template <class F>
Recorded run(EvalModel& model, const json& options, F&& evaluate) {
  EvalContext ctx(model);
  ctx.options = options;
  Recorded r;
  ctx.record = [&](const std::vector<EvalCell>& cells) {
    for (const auto& c : cells)
      r.details.push_back({{"task", c.task}, {"metric", c.metric}, {"setting", c.setting}, {"value", c.value},
                           {"n", c.n}, {"details", c.details}});
  };
  r.out = evaluate(ctx);
  for (auto& d : r.details) d["details"].erase("wall_s");
  return r;
}

}  // namespace

TEST_CASE("S-NIAH and BABILong on the shared generate_until equal the per-task loop (fp64)", "[sniah][babilong]") {
  DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  std::set<double> scores;
  std::set<std::string> predictions;
  for (const std::string family : {"transformer", "gated_deltanet", "oracle"}) {
    auto model = tiny_model(family == "oracle" ? "transformer" : family);
    LanguageModelAdapter runtime(*model, torch::kCPU);
    OracleModel oracle;
    EvalModel& adapter = family == "oracle" ? static_cast<EvalModel&>(oracle) : runtime;
    struct Case {
      std::string task;
      json params, options;
    };
    const std::vector<Case> cases = {
        {"sniah_1", {{"length", 520}, {"tokens_to_generate", 12}}, {{"lengths", "460,520"}, {"depths", {0, 100}}, {"n", 2}}},
        {"sniah_3", {{"length", 700}, {"tokens_to_generate", 10}, {"tokenizer", "byte:plain"}},
         {{"lengths", "700"}, {"depths", {50}}, {"n", 2}}},
        {"babilong_qa1", {{"length", 0}, {"max_new_tokens", 16}}, {{"lengths", {0, 400}}, {"n", 3}}},
        {"babilong_qa2", {{"length", 0}, {"max_new_tokens", 8}, {"format", "prompted"}},
         {{"lengths", {0}}, {"n", 2}, {"mode", "substring"}}},
    };
    for (const auto& c : cases) {
      INFO(family << " " << c.task);
      auto task = TaskRegistry::instance().make(c.task, c.params);
      auto* gen = dynamic_cast<GenerationTask*>(task.get());
      REQUIRE(gen);
      const Recorded old_path = run(adapter, c.options, [&](EvalContext& ctx) { return gen->evaluate(ctx); });
      const Recorded new_path = run(adapter, c.options, [&](EvalContext& ctx) { return evaluate_generation_task(*gen, ctx); });
      CHECK(new_path.out == old_path.out);
      REQUIRE(new_path.details.size() == old_path.details.size());
      for (size_t i = 0; i < new_path.details.size(); ++i) {
        CHECK(new_path.details[i] == old_path.details[i]);
        for (const auto& sample : new_path.details[i]["details"]["samples"]) {
          scores.insert(sample["score"].get<double>());
          predictions.insert(sample["prediction"].get<std::string>());
        }
      }
    }
  }
  CHECK(scores == std::set<double>{0.0, 1.0});  // both outcomes were compared
  CHECK(predictions.size() >= 8);
}

TEST_CASE("generate_until: BOS, left truncation to max_length - max_gen_toks, stop strings, EOS", "[sniah][harness]") {
  ByteTokenizer tok;  // BOS 256, EOS 257
  std::vector<int64_t> script = bytes_of("Paris\nLondon");
  script.push_back(tok.eos_id());
  script.push_back('x');
  ScriptedModel model(script);
  GenerateUntilOptions o;
  // Cut before the first stop string; generation ended at it (6 tokens: "Paris\n").
  CHECK(generate_until(model, tok, {gen_request("Hi", {"\n"}, 32)}, o) == std::vector<std::string>{"Paris"});
  CHECK(model.prompts.back() == std::vector<int64_t>{256, 'H', 'i'});
  CHECK(model.emitted.back() == 6);
  // Empty stop strings are ignored; several are each cut in turn; EOS ends generation and is dropped.
  CHECK(generate_until(model, tok, {gen_request("Hi", {"", "on"}, 32)}, o)[0] == "Paris\nL");
  CHECK(generate_until(model, tok, {gen_request("Hi", {}, 32)}, o)[0] == "Paris\nLondon");
  CHECK(generate_until(model, tok, {gen_request("Hi", {}, 3)}, o)[0] == "Par");
  // add_bos off; max_length keeps the last max_length - max_gen_toks context tokens (lm-eval's left truncation).
  o.add_bos = false;
  generate_until(model, tok, {gen_request("Hello", {}, 2)}, o);
  CHECK(model.prompts.back() == bytes_of("Hello"));
  o.add_bos = true;
  o.max_length = 5;
  generate_until(model, tok, {gen_request("Hello", {}, 2)}, o);
  CHECK(model.prompts.back() == bytes_of("llo"));
  // An empty context becomes the prefix token; progress after each request.
  o.max_length.reset();
  o.add_bos = false;
  std::vector<int64_t> progress;
  o.progress = [&](int64_t done) { progress.push_back(done); };
  CHECK(generate_until(model, tok, {gen_request("", {}, 1), gen_request("a", {}, 1)}, o) ==
        std::vector<std::string>{"P", "P"});
  CHECK(model.prompts[model.prompts.size() - 2] == std::vector<int64_t>{256});
  CHECK(progress == std::vector<int64_t>{1, 2});
  // Bad requests.
  o.max_length = 4;
  CHECK_THROWS_WITH(generate_until(model, tok, {gen_request("a", {}, 4)}, o), Catch::Contains("leaves no context"));
  harness::Request ll = gen_request("a", {}, 1);
  ll.type = harness::RequestType::loglikelihood;
  ll.arguments.push_back(" b");
  CHECK_THROWS_WITH(generate_until(model, tok, {ll}, o), Catch::Contains("loglikelihood"));
}
