// S-NIAH and BABILong on the shared generate_until (engine/evaluation/generate_until.h, engine/evaluation/evaluate.h
// evaluate_generation_task): the cells, rows, samples and predictions equal those of the per-task loop they
// replaced (written out here; fp64 tiny models and a prompt-reading oracle), and generate_until's own rules (BOS,
// truncation, stop strings, EOS) on a scripted model.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>
#include <tuple>

#include "engine/evaluation/evaluate.h"
#include "engine/evaluation/generate_until.h"
#include "engine/evaluation/model_adapter.h"
#include "runtime/model.h"
#include "tasks/babilong.h"
#include "tasks/scoring.h"
#include "tasks/sniah.h"
#include "test_util.h"

using namespace mnemo;

namespace {

LanguageModel tiny_model(const std::string& family) {
  torch::manual_seed(3);
  LanguageModel m(model_config_from_json({{"model", family}, {"vocab_size", 258}, {"d_model", 32}, {"n_layers", 2},
                                          {"n_heads", 2}, {"chunk_size", 8}}));
  m->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.mul_(4);  // a sharper random model: varied greedy outputs, not one repeated token
  return m;
}

template <class T>
std::shared_ptr<T> make_task(const std::string& name, const json& params) {
  auto t = std::dynamic_pointer_cast<T>(TaskRegistry::instance().make(name, params));
  REQUIRE(t);
  return t;
}

// A byte-level model that only generates (every other request is an error); the models below answer generate_greedy.
class GenerationOnlyModel : public EvalModel {
 public:
  int64_t vocab_size() const override { return 258; }
  torch::Device device() const override { return torch::kCPU; }
  torch::Tensor logits(const torch::Tensor&) override { throw Error("not scripted"); }
  torch::Tensor next_token_logprobs(const torch::Tensor&, int64_t) override { throw Error("not scripted"); }
  std::vector<std::pair<double, bool>> loglikelihood_tokens(const std::vector<TokenPair>&, int64_t, int64_t) override {
    throw Error("not scripted");
  }
};

// A model that answers with a fixed script of tokens, following runtime/generation.cpp's loop (a stop id ends it
// and is dropped; should_stop is asked after each token), and records the prompt it was given.
class ScriptedModel : public GenerationOnlyModel {
 public:
  explicit ScriptedModel(std::vector<int64_t> script) : script_(std::move(script)) {}
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
class OracleModel : public GenerationOnlyModel {
 public:
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

// The per-task loop S-NIAH and BABILong ran before they moved onto the shared generate_until (tasks/eval_task.cpp
// generate_text and the evaluate loops of tasks/sniah.cpp and tasks/babilong.cpp, as they were), written out:
// encode_with_bos(prompt), greedy until EOS / a stop string (the text cut before it) / max_new_tokens.
std::string reference_generate_text(EvalModel& model, const Tokenizer& tok, const std::string& prompt,
                                    int64_t max_new_tokens, const std::vector<std::string>& stop_strings) {
  GenerationRequest o;
  o.max_new_tokens = max_new_tokens;
  if (tok.eos_id() >= 0) o.stop_ids.push_back(tok.eos_id());
  if (!stop_strings.empty()) {
    o.should_stop = [&](const std::vector<int64_t>& ids) {
      const std::string text = tok.decode(ids);
      for (const auto& s : stop_strings)
        if (text.find(s) != std::string::npos) return true;
      return false;
    };
  }
  std::string text = tok.decode(model.generate_greedy(tok.encode_with_bos(prompt), o));
  for (const auto& s : stop_strings) {
    const auto p = text.find(s);
    if (p != std::string::npos) text.erase(p);
  }
  return text;
}

struct ReferenceCell {
  json setting, details;  // details without wall_s
  double value = 0;
  int64_t n = 0;
};

std::vector<ReferenceCell> reference_sniah(const SniahTask& task, EvalModel& model, const Tokenizer& tok,
                                           const std::vector<int64_t>& lengths, const std::vector<int64_t>& depths,
                                           int64_t n, int64_t seed) {
  const json p = task.params();
  std::vector<ReferenceCell> cells;
  for (int64_t length : lengths)
    for (int64_t depth : depths) {
      std::vector<double> scores;
      json samples = json::array();
      for (int64_t i = 0; i < n; ++i) {
        const SniahSample s = task.make_sample(Split::test, i, static_cast<uint64_t>(seed), length, depth, tok);
        const std::string pred =
            ruler_postprocess(reference_generate_text(model, tok, s.input, p["tokens_to_generate"].get<int64_t>(), {}));
        const double score = string_match_all(pred, {s.value});
        scores.push_back(score);
        samples.push_back({{"prediction", pred}, {"target", s.value}, {"depth", s.depth}, {"score", score}});
      }
      cells.push_back({{{"length", length}, {"depth", depth}},
                       {{"tokenizer", tok.id()}, {"add_bos", tok.adds_bos()}, {"tokens_to_generate", p["tokens_to_generate"]},
                        {"seed", seed}, {"generator", "reference-style"}, {"samples", samples}},
                       mean_percent(scores), n});
    }
  return cells;
}

std::vector<ReferenceCell> reference_babilong(const BabilongTask& task, int qa, EvalModel& model, const Tokenizer& tok,
                                              const std::vector<int64_t>& lengths, int64_t n, int64_t seed,
                                              const std::string& mode) {
  const json p = task.params();
  const bool finetune = p["format"] == "finetune";
  const std::vector<std::string> stops = finetune ? std::vector<std::string>{"\n"} : std::vector<std::string>{};
  std::vector<ReferenceCell> cells;
  for (int64_t length : lengths) {
    std::vector<double> scores;
    json samples = json::array();
    for (int64_t i = 0; i < n; ++i) {
      const auto it = task.make_item(Split::test, i, static_cast<uint64_t>(seed), length, tok);
      const std::string pred = reference_generate_text(model, tok, it.prompt, p["max_new_tokens"].get<int64_t>(), stops);
      const double score = babilong_score(qa, mode, pred, it.sample.target, it.sample.question);
      scores.push_back(score);
      samples.push_back({{"prediction", pred}, {"target", it.sample.target}, {"score", score}});
    }
    json setting = {{"length", length}, {"haystack", length > 0 ? "gutenberg" : "none"}, {"format", p["format"]},
                    {"scorer", mode}};
    if (!finetune)
      setting.update({{"with_instruction", true}, {"with_examples", true}, {"with_post_prompt", true}});
    cells.push_back({setting,
                     {{"tokenizer", tok.id()}, {"add_bos", tok.adds_bos()}, {"seed", seed},
                      {"max_new_tokens", p["max_new_tokens"]}, {"prompt_reserve", 300}, {"babi_dir", "babi/en-10k"},
                      {"generator", "reference-style"}, {"samples", samples}},
                     mean_percent(scores), n});
  }
  return cells;
}

// The new path's cells, with details reduced to what the reference computes (the haystack/corpus hashes are the
// task's own fields, recorded unchanged).
void check_cells(const std::vector<EvalCell>& got, const json& out, const std::vector<ReferenceCell>& want,
                 const std::string& task, const std::string& metric, std::set<double>& scores,
                 std::set<std::string>& predictions) {
  REQUIRE(got.size() == want.size());
  REQUIRE(out.at("cells").size() == want.size());
  CHECK(out.at("task") == task);
  CHECK(out.at("metric") == metric);
  for (size_t c = 0; c < want.size(); ++c) {
    INFO("cell " << want[c].setting.dump());
    CHECK(got[c].task == task);
    CHECK(got[c].metric == metric);
    CHECK(got[c].setting == want[c].setting);
    CHECK(got[c].value == want[c].value);
    CHECK(got[c].n == want[c].n);
    json summary = want[c].setting;
    summary["value"] = want[c].value;
    summary["n"] = want[c].n;
    CHECK(out.at("cells")[c] == summary);
    CHECK(got[c].details.contains("wall_s"));
    for (auto it = want[c].details.begin(); it != want[c].details.end(); ++it) {
      INFO(it.key());
      CHECK(got[c].details.at(it.key()) == it.value());
    }
    const std::set<std::string> keys = task.rfind("sniah", 0) == 0
        ? std::set<std::string>{"tokenizer", "add_bos", "haystack", "haystack_sha256", "wordlists_sha256",
                                "tokens_to_generate", "seed", "generator", "wall_s", "samples"}
        : std::set<std::string>{"tokenizer", "add_bos", "seed", "max_new_tokens", "prompt_reserve", "corpus",
                                "babi_dir", "generator", "wall_s", "samples"};
    std::set<std::string> got_keys;
    for (auto it = got[c].details.begin(); it != got[c].details.end(); ++it) got_keys.insert(it.key());
    CHECK(got_keys == keys);
    for (const auto& sample : want[c].details.at("samples")) {
      scores.insert(sample["score"].get<double>());
      predictions.insert(sample["prediction"].get<std::string>());
    }
  }
}

}  // namespace

TEST_CASE("S-NIAH and BABILong on the shared generate_until equal the per-task loop they replaced (fp64)",
          "[sniah][babilong]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  std::set<double> scores;
  std::set<std::string> predictions;
  for (const std::string family : {"transformer", "gated_deltanet", "oracle"}) {
    INFO(family);
    auto model = tiny_model(family == "oracle" ? "transformer" : family);
    LanguageModelAdapter runtime(*model, torch::kCPU);
    OracleModel oracle;
    EvalModel& adapter = family == "oracle" ? static_cast<EvalModel&>(oracle) : runtime;
    auto evaluate = [&](const GenerationTask& task, const json& options, std::vector<EvalCell>& cells) {
      EvalContext ctx(adapter);
      ctx.options = options;
      ctx.record = [&](const std::vector<EvalCell>& c) { cells = c; };
      return evaluate_generation_task(task, ctx);
    };
    // S-NIAH-1 (noise haystack, byte tokenizer with BOS/EOS) and S-NIAH-3 (essays, UUIDs, no BOS/EOS).
    for (const auto& [name, params, lengths, depths] :
         std::vector<std::tuple<std::string, json, std::vector<int64_t>, std::vector<int64_t>>>{
             {"sniah_1", {{"length", 520}, {"tokens_to_generate", 12}}, {460, 520}, {0, 100}},
             {"sniah_3", {{"length", 700}, {"tokens_to_generate", 10}, {"tokenizer", "byte:plain"}}, {700}, {50}}}) {
      INFO(name);
      auto task = make_task<SniahTask>(name, params);
      std::vector<EvalCell> cells;
      const json out = evaluate(*task, {{"lengths", lengths}, {"depths", depths}, {"n", 2}}, cells);
      const auto tok = load_tokenizer(params.value("tokenizer", std::string("byte")));
      check_cells(cells, out, reference_sniah(*task, adapter, *tok, lengths, depths, 2, 42), name,
                  "string_match_all", scores, predictions);
    }
    // BABILong qa1 in the fine-tune format (stop "\n") and qa2 prompted (EOS only), strict and substring scorers.
    for (const auto& [qa, params, lengths, mode] : std::vector<std::tuple<int, json, std::vector<int64_t>, std::string>>{
             {1, {{"length", 0}, {"max_new_tokens", 16}}, {0, 400}, "strict"},
             {2, {{"length", 0}, {"max_new_tokens", 8}, {"format", "prompted"}}, {0}, "substring"}}) {
      INFO("babilong_qa" << qa);
      auto task = make_task<BabilongTask>("babilong_qa" + std::to_string(qa), params);
      std::vector<EvalCell> cells;
      const json out = evaluate(*task, {{"lengths", lengths}, {"n", 3}, {"mode", mode}}, cells);
      ByteTokenizer tok;
      check_cells(cells, out, reference_babilong(*task, qa, adapter, tok, lengths, 3, 42, mode),
                  "babilong_qa" + std::to_string(qa), mode == "strict" ? "accuracy" : "substring_accuracy", scores,
                  predictions);
    }
  }
  CHECK(scores == std::set<double>{0.0, 1.0});  // both outcomes were compared
  CHECK(predictions.size() >= 8);
}

TEST_CASE("S-NIAH's prefill_chunk option reaches the model: chunked prefill gives the same answers (fp64)", "[sniah]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  for (const std::string family : {"transformer", "gated_deltanet"}) {
    INFO(family);
    auto model = tiny_model(family);
    LanguageModelAdapter adapter(*model, torch::kCPU);
    auto task = make_task<SniahTask>("sniah_1", {{"length", 520}, {"tokens_to_generate", 12}});
    auto samples = [&](const json& options) {
      EvalContext ctx(adapter);
      ctx.options = options;
      json out = json::array();
      ctx.record = [&](const std::vector<EvalCell>& cells) {
        for (const auto& c : cells) out.push_back(c.details.at("samples"));
      };
      evaluate_generation_task(*task, ctx);
      return out;
    };
    const json whole = samples({{"n", 2}, {"depths", {30}}});
    CHECK(samples({{"n", 2}, {"depths", {30}}, {"prefill_chunk", 64}}) == whole);
    CHECK_THROWS_WITH(samples({{"n", 1}, {"prefill_chunk", -1}}), Catch::Contains("prefill_chunk"));
  }
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
