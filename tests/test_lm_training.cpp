// Language-model pretraining: corpus windows and packing, accumulation == one big batch,
// bit-exact resume, perplexity arithmetic, length evaluation through the state, every family trains.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "engine/io/checkpoint.h"
#include "engine/training/data_source.h"
#include "engine/evaluation/evaluate.h"
#include "engine/evaluation/model_adapter.h"
#include "engine/config/presets.h"
#include "engine/config/run_config.h"
#include "engine/training/trainer.h"
#include "results/db.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"
#include "tasks/lm_metrics.h"
#include "tasks/lm_task.h"
#include "file_util.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

// A folder of `n_docs` small documents (one per .txt file): sentences over a 12-word vocabulary.
fs::path write_corpus(const std::string& name, int n_docs = 12, int words_per_doc = 60) {
  auto dir = test::temp_dir(name) / "corpus";
  fs::create_directories(dir);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it", "was"};
  uint64_t x = 12345;
  for (int d = 0; d < n_docs; ++d) {
    char fname[32];
    std::snprintf(fname, sizeof fname, "doc%02d.txt", d);
    std::ofstream f(dir / fname);
    for (int w = 0; w < words_per_doc; ++w) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      f << words[(x >> 33) % 12] << (w % 9 == 8 ? ".\n" : " ");
    }
  }
  return dir;
}

json lm_run(const std::string& model, const fs::path& corpus) {
  return {{"model", model}, {"task", "lm"},        {"corpus", corpus.string()}, {"val_every", 4},
          {"seq_len", 16},  {"d_model", 32},       {"n_layers", 1},             {"n_heads", 2},
          {"batch_size", 4}, {"steps", 6},         {"eval_every", 3},           {"log_every", 1},
          {"lr", 3e-3},     {"warmup_frac", 0.0},  {"val_tokens", 256},         {"seed", 1},
          {"cache_dir", (corpus.parent_path() / "cache").string()}, {"device", "cpu"}};
}

std::map<std::string, torch::Tensor> weights(const std::string& out_dir) {
  Backbone b = load_backbone(out_dir, torch::kCPU);
  std::map<std::string, torch::Tensor> w;
  for (const auto& p : b.module->named_parameters()) w[p.key()] = p.value().detach().clone();
  return w;
}

}  // namespace

TEST_CASE("perplexity arithmetic: windows, first token unpredicted, token weighting, bits per byte, buckets",
          "[lm][ppl]") {
  // A stream of 10 tokens, windows of 4: [0,4) [4,8) and the partial [8,10): 3 + 3 + 1 predicted tokens.
  std::vector<int64_t> stream = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto read = [&](int64_t s, int64_t n, int64_t* out) { std::copy(stream.begin() + s, stream.begin() + s + n, out); };
  const double V = 16;
  // Uniform model: every next token has log-prob -ln V, so ppl = V exactly.
  auto uniform = [&](const torch::Tensor& ids) {
    return torch::full({ids.size(0), ids.size(1) - 1}, -std::log(V), torch::kFloat64);
  };
  std::vector<int32_t> bytes(16, 2);  // every token = 2 bytes of text
  WindowScoring opt;
  opt.length = 4;
  opt.batch_size = 2;
  opt.bucket_size = 2;
  WindowScore s = score_windows(int64_t(stream.size()), read, uniform, bytes, opt);
  REQUIRE(s.windows == 3);
  REQUIRE(s.total.tokens == 7);
  REQUIRE(s.total.ppl() == Approx(V).epsilon(1e-12));
  REQUIRE(s.total.bpb() == Approx(std::log2(V) / 2).epsilon(1e-12));
  // Positions 1 (bucket 0) and 2, 3 (bucket 1): per window 1 + 2; the partial window adds position 1.
  REQUIRE(s.buckets.size() == 2);
  REQUIRE(s.buckets[0].tokens == 3);
  REQUIRE(s.buckets[1].tokens == 4);
  // Token weighting: a model that is sure of token 10 (the partial window's only prediction).
  auto sure_of_10 = [&](const torch::Tensor& ids) {
    auto lp = torch::full({ids.size(0), ids.size(1) - 1}, -std::log(V), torch::kFloat64);
    for (int64_t b = 0; b < ids.size(0); ++b)
      for (int64_t p = 1; p < ids.size(1); ++p)
        if (ids[b][p].item<int64_t>() == 10) lp[b][p - 1] = 0.0;
    return lp;
  };
  s = score_windows(int64_t(stream.size()), read, sure_of_10, bytes, opt);
  REQUIRE(s.total.ppl() == Approx(std::exp(6 * std::log(V) / 7)).epsilon(1e-12));
  opt.max_tokens = 8;  // only the two full windows
  s = score_windows(int64_t(stream.size()), read, uniform, bytes, opt);
  REQUIRE(s.total.tokens == 6);
}

TEST_CASE("corpus windows: packed random and sequential windows are slices of the shard, BOS resets split rows",
          "[lm][data]") {
  auto corpus = write_corpus("lm_windows");
  json p = TaskRegistry::instance().resolve("lm", {{"corpus", corpus.string()}, {"val_every", 4}, {"seq_len", 16},
                                                  {"cache_dir", (corpus.parent_path() / "cache").string()}});
  LmTask task(p);
  LmData d = task.prepare({});
  const TokenShard& shard = *d.train;
  CorpusWindows w;
  w.seq_len = 16;
  w.batch_size = 3;
  w.grad_accum = 2;
  w.seed = 7;
  w.sampler = "sequential";
  auto src = make_corpus_source(shard, w, torch::kCPU);
  std::vector<int64_t> expect(17);
  // Sequential: row r = (step * accum + micro) * B + j starts at (r mod windows) * T.
  for (int64_t step : {0, 5}) {
    TrainBatch b = src->batch(step, 1);
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t r = (step * 2 + 1) * 3 + j;
      shard.read((r % ((shard.size() - 1) / 16)) * 16, 17, expect.data());
      for (int64_t t = 0; t < 16; ++t) {
        REQUIRE(b.input_ids[j][t].item<int64_t>() == expect[size_t(t)]);
        REQUIRE(b.labels[j][t].item<int64_t>() == expect[size_t(t + 1)]);
      }
    }
  }
  // Random windows: a pure function of (seed, row): the same call twice gives the same batch.
  w.sampler = "random";
  auto rnd = make_corpus_source(shard, w, torch::kCPU);
  REQUIRE(torch::equal(rnd->batch(3, 0).input_ids, rnd->batch(3, 0).input_ids));
  REQUIRE_FALSE(torch::equal(rnd->batch(3, 0).input_ids, rnd->batch(3, 1).input_ids));
  // reset_state_at_bos: the same windows, with every BOS marked as the start of a sequence; all tokens labelled.
  w.seq_len = 200;  // longer than a document: every window crosses a boundary
  auto whole = make_corpus_source(shard, w, torch::kCPU)->batch(0, 0);
  REQUIRE_FALSE(whole.sequence_starts.defined());
  w.reset_at_bos = true;
  w.bos_id = d.tokenizer->bos_id();
  auto split = make_corpus_source(shard, w, torch::kCPU);
  TrainBatch b = split->batch(0, 0);
  REQUIRE(torch::equal(b.input_ids, whole.input_ids));
  REQUIRE(torch::equal(b.labels, whole.labels));
  REQUIRE(b.labelled == 3 * 200);
  REQUIRE(torch::equal(b.sequence_starts, b.input_ids == w.bos_id));
  REQUIRE(b.sequence_starts.narrow(1, 1, 199).any().item<bool>());
  // Packing off: every window lies inside one document; too long a context is an error.
  w.reset_at_bos = false;
  w.packing = false;
  w.seq_len = 16;
  auto inside = make_corpus_source(shard, w, torch::kCPU);
  TrainBatch ib = inside->batch(0, 0);
  REQUIRE((ib.input_ids.narrow(1, 1, 15) == d.tokenizer->bos_id()).sum().item<int64_t>() == 0);
  w.seq_len = 5000;
  REQUIRE_THROWS_WITH(make_corpus_source(shard, w, torch::kCPU), Catch::Contains("longer than every document"));
}

TEST_CASE("gradient accumulation equals one big batch (fp64): 2 x 4 sequences == 1 x 8", "[lm][accum]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  auto corpus = write_corpus("lm_accum");
  auto dir = corpus.parent_path();
  TrainOptions opt;
  opt.db_path = (dir / "a.sqlite").string();
  opt.quiet = true;
  json big = lm_run("gated_deltanet", corpus);
  big["batch_size"] = 8;
  big["steps"] = 3;
  json acc = big;
  acc["batch_size"] = 4;
  acc["grad_accum"] = 2;
  opt.out_dir = (dir / "big").string();
  auto rb = train(big, opt);
  opt.out_dir = (dir / "acc").string();
  auto ra = train(acc, opt);
  REQUIRE(ra.final_train_loss == Approx(rb.final_train_loss).epsilon(1e-12));
  auto wa = weights((dir / "acc").string()), wb = weights((dir / "big").string());
  REQUIRE(wa.size() == wb.size());
  for (const auto& [k, v] : wb) {
    INFO(k);
    REQUIRE(test::max_rel_err(wa.at(k), v, 1e-8) < 1e-10);
  }
  acc["grad_accum"] = 0;
  REQUIRE_THROWS_WITH(train(acc, opt), Catch::Contains("grad_accum"));
}

TEST_CASE("reset_state_at_bos trains every document from a fresh state: Gated DeltaNet's packed form and padded "
          "groups give the same weights (fp64)",
          "[lm][packed]") {
  test::DefaultDtype f64(caffe2::TypeMeta::Make<double>());
  auto corpus = write_corpus("lm_reset_bos", 12, 8);  // documents shorter than a window
  auto dir = corpus.parent_path();
  TrainOptions opt;
  opt.db_path = (dir / "a.sqlite").string();
  opt.quiet = true;
  json cfg = lm_run("gated_deltanet", corpus);
  cfg["reset_state_at_bos"] = true;
  cfg["seq_len"] = 48;
  cfg["steps"] = 3;
  opt.out_dir = (dir / "padded").string();
  auto padded = train(cfg, opt);
  opt.out_dir = (dir / "packed").string();
  TrainResult packed;
  {
    const PackedHostFormsScope host_forms;  // the route of a GPU: the fused chunk form with cu_seqlens
    packed = train(cfg, opt);
  }
  REQUIRE(packed.final_train_loss == Approx(padded.final_train_loss).epsilon(1e-12));
  auto wa = weights((dir / "packed").string()), wb = weights((dir / "padded").string());
  for (const auto& [k, v] : wb) {
    INFO(k);
    REQUIRE(test::max_rel_err(wa.at(k), v, 1e-8) < 1e-10);
  }
  // The same run without the reset reads across documents: another loss.
  cfg["reset_state_at_bos"] = false;
  opt.out_dir = (dir / "across").string();
  REQUIRE(train(cfg, opt).final_train_loss != Approx(padded.final_train_loss).epsilon(1e-9));
}

TEST_CASE("language-model resume is bit-exact on CPU (weights, metric rows)", "[lm][resume]") {
  auto corpus = write_corpus("lm_resume");
  auto dir = corpus.parent_path();
  json cfg = lm_run("transformer", corpus);
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.quiet = true;
  opt.out_dir = (dir / "whole").string();
  auto whole = train(cfg, opt);
  TrainOptions part = opt;
  part.out_dir = (dir / "parts").string();
  part.stop_after = 2;
  auto first = train(cfg, part);
  REQUIRE(first.stopped);
  part.stop_after = 0;
  part.resume = true;
  auto second = train(cfg, part);
  REQUIRE(second.steps == 6);
  auto wa = weights(opt.out_dir), wb = weights(part.out_dir);
  for (const auto& [k, v] : wa) {
    INFO(k);
    REQUIRE(torch::equal(wb.at(k), v));
  }
  ResultsDB db(opt.db_path);
  std::map<std::string, double> a, b;
  for (const auto& r : db.metrics(whole.run_id))
    if (r.split == "val" || (r.split == "train" && r.name == "loss")) a[std::to_string(r.step) + r.split + r.name] = r.value;
  for (const auto& r : db.metrics(first.run_id))
    if ((r.split == "val" && r.step != 2) || (r.split == "train" && r.name == "loss"))
      b[std::to_string(r.step) + r.split + r.name] = r.value;
  REQUIRE(a == b);
  REQUIRE(a.count("6valppl") == 1);
  REQUIRE(std::isfinite(whole.best_primary));
  REQUIRE(whole.primary_metric == "ppl");
}

TEST_CASE("lm_ppl: chunked evaluation through the state equals one forward, a tokenizer of another vocabulary "
          "is refused", "[lm][lm_ppl]") {
  auto corpus = write_corpus("lm_eval");
  auto dir = corpus.parent_path();
  for (const std::string model : {"transformer", "gated_deltanet", "mamba2"}) {
    DYNAMIC_SECTION(model) {
      json cfg = lm_run(model, corpus);
      cfg["steps"] = 2;
      TrainOptions opt;
      opt.db_path = (dir / "e.sqlite").string();
      opt.quiet = true;
      opt.out_dir = (dir / model).string();
      train(cfg, opt);
      EvalRequest a;
      a.checkpoint = opt.out_dir;
      a.task = "lm_ppl";
      a.db = opt.db_path;
      a.params = {{"lengths", "16,64"}, {"chunk", 0}};
      json whole = evaluate_checkpoint(a, {});
      a.params = {{"lengths", "16,64"}, {"chunk", 8}};
      json chunked = evaluate_checkpoint(a, {});
      REQUIRE(whole["cells"].size() == 2);
      for (size_t i = 0; i < 2; ++i)
        REQUIRE(chunked["cells"][i]["ppl"].get<double>() ==
                Approx(whole["cells"][i]["ppl"].get<double>()).epsilon(1e-4));
      ResultsDB db(opt.db_path);
      int buckets = 0;
      for (const auto& e : db.evals())
        if (e.task == "lm_ppl" && e.metric == "ppl_bucket" && e.model == model) ++buckets;
      REQUIRE(buckets == 8);  // the longest length 64 in buckets of 64 / 8
      a.params = {{"tokenizer", "byte:plain"}};
      // another tokenizer than the checkpoint's is refused by name; allowed explicitly, its vocabulary still has to
      // fit the embedding
      REQUIRE_THROWS_WITH(evaluate_checkpoint(a, {}), Catch::Contains("--allow-other-tokenizer"));
      a.allow_other_tokenizer = true;
      REQUIRE_THROWS_WITH(evaluate_checkpoint(a, {}), Catch::Contains("vocab_size"));
    }
  }
}

TEST_CASE("lm_ppl through the evaluation driver gives the window scoring's numbers: ppl, bpb and every position "
          "bucket, batched, chunked, with a partial last window, and eval --tasks lm_ppl scores what --task lm_ppl does",
          "[lm][lm_ppl][eval]") {
  auto corpus = write_corpus("lm_ppl_driver");
  auto dir = corpus.parent_path();
  json cfg = lm_run("gated_deltanet", corpus);
  cfg["steps"] = 2;
  TrainOptions opt;
  opt.db_path = (dir / "d.sqlite").string();
  opt.quiet = true;
  opt.out_dir = (dir / "run").string();
  train(cfg, opt);
  EvalRequest a;
  a.checkpoint = opt.out_dir;
  a.task = "lm_ppl";
  a.db = opt.db_path;
  // 200 tokens: 12 windows of 16 and a partial one of 8; 4 windows of 48 and a partial one of 8. Buckets of 48 / 8.
  a.params = {{"lengths", "16,48"}, {"chunk", 8}, {"batch_size", 3}, {"max_tokens", 200}};
  const json out = evaluate_checkpoint(a, {});
  REQUIRE(out.at("cells").size() == 2);

  // The reference: the same windows scored by score_windows (the trainer's validation) on the same model.
  const LmPplTask task(task_params_of(resolve_run_config(load_checkpoint_config(opt.out_dir))));
  const LmData data = task.prepare({}, false);
  Backbone model = load_backbone(opt.out_dir, torch::kCPU);
  LanguageModelAdapter adapter(*model.language_model, torch::kCPU);
  auto read = [&](int64_t s, int64_t n, int64_t* ids) { data.validation->read(s, n, ids); };
  auto logprobs = [&](const torch::Tensor& ids) { return adapter.next_token_logprobs(ids, 8); };
  ResultsDB db(opt.db_path);
  const auto rows = db.evals("lm_ppl");
  auto row_value = [&](const std::string& metric, int64_t length, int64_t bucket_start) {
    for (const auto& r : rows) {
      const json setting = json::parse(r.setting_json);
      if (r.metric == metric && setting.at("length") == length &&
          (bucket_start < 0 || setting.at("bucket_start") == bucket_start))
        return std::make_pair(r.value, r.n);
    }
    FAIL("no evals row " << metric << " at length " << length << " bucket " << bucket_start);
    return std::make_pair(0.0, int64_t{0});
  };
  for (const int64_t L : {int64_t{16}, int64_t{48}}) {
    WindowScoring w;
    w.length = L;
    w.max_tokens = 200;
    w.batch_size = 3;
    w.bucket_size = L == 48 ? 6 : 0;
    const WindowScore ref = score_windows(data.validation->size(), read, logprobs, data.byte_lengths, w);
    CHECK(row_value("ppl", L, -1).first == Approx(ref.total.ppl()).epsilon(1e-12));
    CHECK(row_value("bpb", L, -1).first == Approx(ref.total.bpb()).epsilon(1e-12));
    CHECK(row_value("ppl", L, -1).second == ref.windows);
    if (L == 48) {
      REQUIRE(ref.buckets.size() == 8);
      for (size_t k = 0; k < ref.buckets.size(); ++k)
        CHECK(row_value("ppl_bucket", L, int64_t(k) * 6).first == Approx(ref.buckets[k].ppl()).epsilon(1e-12));
    }
  }
  CHECK(rows.size() == 2 + 2 + 8);

  // eval --tasks lm_ppl: the checkpoint's context (16) by default; results.json, the samples (one window each) and
  // the same value as --task lm_ppl at that length.
  const fs::path eval_dir = dir / "eval";
  auto suite = test::run_mnemo("eval --checkpoint " + opt.out_dir + " --tasks lm_ppl --log-samples --output-path " +
                               eval_dir.string() + " --db " + (dir / "s.sqlite").string());
  INFO(suite.output);
  REQUIRE(suite.exit_code == 0);
  auto single = test::run_mnemo("eval --checkpoint " + opt.out_dir + " --task lm_ppl --db " + (dir / "t.sqlite").string());
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  const json one = json::parse(single.output.substr(single.output.rfind("{\"cells\"")));
  REQUIRE(one.at("cells").size() == 1);
  json results;
  std::ifstream(eval_dir / "results.json") >> results;
  CHECK(results.at("results").at("lm_ppl").at("ppl,none").get<double>() ==
        Approx(one.at("cells")[0].at("ppl").get<double>()).epsilon(1e-12));
  CHECK(results.at("configs").at("lm_ppl").at("output_type") == "token_logprobs");
  const auto samples = test::read_jsonl(eval_dir / "samples_lm_ppl.jsonl");
  CHECK(static_cast<int64_t>(samples.size()) == one.at("cells")[0].at("n").get<int64_t>());
  CHECK(samples.at(0).at("resps")[0][0].size() == 15);  // a window of 16: 15 predicted tokens
}

TEST_CASE("every registered family trains on --task lm: the loss falls within a few steps", "[lm][families]") {
  auto corpus = write_corpus("lm_families", 8, 30);
  auto dir = corpus.parent_path();
  for (const std::string& model : Registry::instance().model_names()) {
    DYNAMIC_SECTION(model) {
      json cfg = lm_run(model, corpus);
      cfg["n_layers"] = int64_t(Registry::instance().model(model).layer_pattern.size());
      cfg["sampler"] = "sequential";
      cfg["steps"] = 10;
      cfg["eval_every"] = 10;
      cfg["lr"] = 1e-2;
      cfg["val_tokens"] = 64;
      TrainOptions opt;
      opt.db_path = (dir / "f.sqlite").string();
      opt.quiet = true;
      opt.out_dir = (dir / model).string();
      auto r = train(cfg, opt);
      ResultsDB db(opt.db_path);
      double first = NAN, last = NAN;
      for (const auto& m : db.metrics(r.run_id))
        if (m.split == "train" && m.name == "loss") {
          if (std::isnan(first)) first = m.value;
          last = m.value;
        }
      INFO("first " << first << " last " << last);
      REQUIRE(last < first - 0.5);
      REQUIRE(std::isfinite(r.final_primary));
    }
  }
}

TEST_CASE("size presets and recipes: explicit keys win, unknown names are errors, counts are computed",
          "[lm][sizes]") {
  json cfg = resolve_run_config({{"model", "transformer"}, {"task", "lm"}, {"size", "small"}});
  REQUIRE(cfg["d_model"] == 256);
  REQUIRE(cfg["n_layers"] == 6);
  cfg = resolve_run_config({{"model", "transformer"}, {"task", "lm"}, {"size", "small"}, {"d_model", 128}});
  REQUIRE(cfg["d_model"] == 128);
  cfg = resolve_run_config({{"model", "gla"}, {"task", "lm"}, {"size", "340M"}, {"recipe", "titans"}});
  REQUIRE(cfg["lr"] == Approx(1.5e-3));
  REQUIRE(cfg["seq_len"] == 4096);
  REQUIRE(cfg["batch_size"] == 128);
  REQUIRE(cfg["warmup_steps"] == 1024);
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "gla"}, {"task", "lm"}, {"size", "huge"}}),
                      Catch::Contains("unknown size 'huge'"));
  REQUIRE_THROWS_WITH(resolve_run_config({{"model", "gla"}, {"task", "lm"}, {"recipe", "titans"}}),
                      Catch::Contains("gives a peak learning rate"));
  REQUIRE(resolve_run_config({{"model", "gla"}, {"task", "lm"}, {"recipe", "titans"}, {"lr", 1e-3}})["lr"] == 1e-3);
  // The count equals the built model's.
  json flat = {{"model", "gated_deltanet"}, {"d_model", 64}, {"n_layers", 2}, {"n_heads", 2}};
  ModelConfig mc = model_config_from_json(flat);
  mc.vocab_size = 300;
  LanguageModel lm(mc);
  REQUIRE(count_parameters(mc) == lm->num_parameters());
}

TEST_CASE("language-model bad input: empty corpus, no held-out documents, NaN loss", "[lm][errors]") {
  auto dir = test::temp_dir("lm_bad");
  fs::create_directories(dir / "empty");
  TrainOptions opt;
  opt.db_path = (dir / "b.sqlite").string();
  opt.quiet = true;
  opt.out_dir = (dir / "run").string();
  json cfg = lm_run("transformer", dir / "empty");
  REQUIRE_THROWS(train(cfg, opt));
  auto corpus = write_corpus("lm_bad2", 3);
  cfg = lm_run("transformer", corpus);
  cfg["val_every"] = 0;
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("held-out"));
  cfg["val_every"] = 4;  // 3 documents: none is the 4th
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("held-out"));
  // Nothing recorded for runs that never started.
  ResultsDB db(opt.db_path);
  REQUIRE(db.runs().empty());
  // NaN loss: the run is marked failed with the step.
  auto ok = write_corpus("lm_bad3");
  cfg = lm_run("transformer", ok);
  cfg["lr"] = 1e30;
  cfg["grad_clip"] = 0.0;
  cfg["steps"] = 20;
  opt.out_dir = (dir / "nan").string();
  REQUIRE_THROWS_WITH(train(cfg, opt), Catch::Contains("at step"));
  const auto runs = db.runs();
  REQUIRE(runs.size() == 1);
  REQUIRE(runs[0].status == "failed");
}

TEST_CASE("eval --tasks: one request at a time by default on the CPU, --batch-size B when given, same scores",
          "[lm][harness][cli]") {
  const auto corpus = write_corpus("eval_batch");
  const auto dir = corpus.parent_path();
  std::ofstream(dir / "run.json") << lm_run("transformer", corpus).dump();
  const std::string db = (dir / "r.sqlite").string(), run = (dir / "run").string();
  auto t = test::run_mnemo("train --config " + (dir / "run.json").string() + " --db " + db + " --out " + run + " --quiet");
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  auto eval = [&](const std::string& extra, const std::string& out) {
    auto r = test::run_mnemo("eval --checkpoint " + run + " --tasks piqa --limit 3 --max-length 512 --db " + db + " --output-path " +
                             (dir / out).string() + extra);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::ifstream f(dir / out / "results.json");
    REQUIRE(f.good());
    return std::make_pair(r.output, json::parse(f));
  };
  const auto [default_out, default_json] = eval("", "b_default");
  CHECK_THAT(default_out, Catch::Contains("batch_size: 1,"));
  const auto [three_out, three_json] = eval(" --batch-size 3", "b3");
  CHECK_THAT(three_out, Catch::Contains("batch_size: 3,"));
  // Rows are independent (right padding, causal models): the batch changes rounding at most.
  const double a = default_json.at("results").at("piqa").at("acc,none").get<double>();
  const double b = three_json.at("results").at("piqa").at("acc,none").get<double>();
  CHECK(a == b);
}
