// MAD suite (docs/tasks.md#mad): generator properties and determinism for the six tasks, the
// difficulty grids, the registry entries, mad-lab's accuracy on hand-made cases, and the
// compression autoencoder.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "engine/tools/report_catalog.h"
#include "reports/mad_score.h"
#include "reports/report.h"
#include "engine/config/run_config.h"
#include "runtime/mad_autoencoder.h"
#include "runtime/registry.h"
#include "synthetic/mad.h"
#include "synthetic/mqar.h"
#include "engine/tools/sweep.h"
#include "tasks/mad_tasks.h"
#include "test_util.h"

using namespace mnemo;

namespace {

std::vector<TokenExample> make(MadTask t, const json& overrides, Split split, int64_t n, uint64_t seed = 7) {
  MadParams p = mad_params_from_json(t, overrides);
  std::vector<TokenExample> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(mad_example(t, p, split, example_seed(split, seed, i)));
  return out;
}

int64_t count_labels(const TokenExample& ex) {
  int64_t n = 0;
  for (auto l : ex.labels) n += l != kIgnoreLabel;
  return n;
}

}  // namespace

TEST_CASE("MAD generators are deterministic per seed and differ across seeds and splits", "[mad]") {
  for (MadTask t : mad_tasks()) {
    INFO(mad_task_name(t));
    MadParams p = mad_baseline(t);
    auto a = mad_example(t, p, Split::train, 1234);
    auto b = mad_example(t, p, Split::train, 1234);
    REQUIRE(a.input_ids == b.input_ids);
    REQUIRE(a.labels == b.labels);
    auto c = mad_example(t, p, Split::train, 1235);
    REQUIRE(c.input_ids != a.input_ids);
    REQUIRE(a.input_ids.size() == static_cast<size_t>(mad_input_length(t, p)));
    REQUIRE(a.labels.size() == a.input_ids.size());
    REQUIRE(count_labels(a) > 0);
    for (auto tok : a.input_ids) {
      REQUIRE(tok >= 0);
      REQUIRE(tok < p.vocab_size);
    }
    // train and test sets come from disjoint seed ranges: no shared example in 200 draws
    auto train = make(t, json::object(), Split::train, 200);
    auto test = make(t, json::object(), Split::test, 200);
    if (t != MadTask::memorization)  // 16 keys out of 127: collisions are possible but rare
      REQUIRE(fraction_of_test_in_train(train, test) == 0.0);
  }
}

TEST_CASE("MAD in-context recall: key/value halves, consistent pairs, shifted targets", "[mad]") {
  const auto train = make(MadTask::in_context_recall, json::object(), Split::train, 50);
  const auto test = make(MadTask::in_context_recall, json::object(), Split::test, 50);
  for (size_t e = 0; e < train.size(); ++e) {
    const auto& ex = train[e];
    REQUIRE(ex.input_ids.size() == 127);  // L - 1
    // training: plain next-token targets everywhere
    for (size_t i = 0; i + 1 < ex.input_ids.size(); ++i) REQUIRE(ex.labels[i] == ex.input_ids[i + 1]);
  }
  for (const auto& ex : test) {
    // tokens = k v k v ... (127 inputs = 63 pairs + the probe key); keys in [0, 8), values in [8, 16)
    std::map<int64_t, int64_t> kv;
    std::set<int64_t> seen;
    for (size_t i = 0; i + 1 < ex.input_ids.size(); i += 2) {
      const int64_t k = ex.input_ids[i], v = ex.input_ids[i + 1];
      REQUIRE(k < 8);
      REQUIRE(v >= 8);
      REQUIRE(v < 16);
      if (kv.count(k)) REQUIRE(kv[k] == v);  // a key keeps its value within the sequence
      kv[k] = v;
      // the label of the prediction made at the key is its value iff the key was seen before
      REQUIRE(ex.labels[i] == (seen.count(k) ? v : kIgnoreLabel));
      REQUIRE(ex.labels[i + 1] == kIgnoreLabel);
      seen.insert(k);
    }
    const int64_t probe = ex.input_ids.back();
    REQUIRE(seen.count(probe) == 1);               // the final probe asks a presented key
    REQUIRE(ex.labels.back() == kv.at(probe));  // ... and is scored
  }
}

TEST_CASE("MAD noisy in-context recall: noise pairs are unscored, frac_noise is respected", "[mad]") {
  const auto test = make(MadTask::noisy_in_context_recall, {{"frac_noise", 0.4}}, Split::test, 200);
  // V = 32, noise 16: keys [0, 8), values [8, 16), noise [16, 32)
  int64_t slots = 0, noise_slots = 0;
  for (const auto& ex : test) {
    for (size_t i = 0; i + 1 < ex.input_ids.size(); i += 2) {
      const int64_t a = ex.input_ids[i], b = ex.input_ids[i + 1];
      const bool noise = a >= 16;
      REQUIRE((b >= 16) == noise);  // noise comes in pairs
      if (noise) {
        REQUIRE(a < 32);
        REQUIRE(ex.labels[i] == kIgnoreLabel);
      } else {
        REQUIRE(a < 8);
        REQUIRE(b >= 8);
        REQUIRE(b < 16);
      }
      ++slots;
      noise_slots += noise;
    }
  }
  const double frac = static_cast<double>(noise_slots) / slots;
  CHECK(frac == Approx(0.4 * 62.0 / 63.0).margin(0.02));  // one protected slot per sequence
}

TEST_CASE("MAD fuzzy in-context recall: motifs, padding and maximal test keys", "[mad]") {
  MadParams p = mad_baseline(MadTask::fuzzy_in_context_recall);  // V = 16: pad 15, keys [0,7), values [7,15)
  for (Split split : {Split::train, Split::test}) {
    for (uint64_t s = 0; s < 100; ++s) {
      auto ex = mad_example(MadTask::fuzzy_in_context_recall, p, split, s);
      REQUIRE(ex.input_ids.size() == 128);
      REQUIRE(ex.input_ids[0] == 15);  // left padding (always >= 2 pad tokens)
      for (auto tok : ex.input_ids) REQUIRE(tok < 16);
      if (split == Split::train) {
        for (size_t i = 0; i + 1 < ex.input_ids.size(); ++i) REQUIRE(ex.labels[i] == ex.input_ids[i + 1]);
        continue;
      }
      // test: the scored tail is the final probe's value motif, 1..3 distinct value tokens
      int64_t tail = 0;
      for (auto it = ex.labels.rbegin(); it != ex.labels.rend() && *it != kIgnoreLabel; ++it) ++tail;
      REQUIRE(tail >= 1);
      REQUIRE(tail <= 3);
      std::set<int64_t> motif;
      for (int64_t i = 0; i < tail; ++i) {
        int64_t v = ex.labels[ex.labels.size() - 1 - i];
        REQUIRE(v >= 7);
        REQUIRE(v < 15);
        motif.insert(v);
      }
      REQUIRE(motif.size() == static_cast<size_t>(tail));
      // maximal keys at test time: the 3 inputs ending at the first target's position are the
      // probe key's tokens
      const size_t first_target = ex.labels.size() - tail;
      for (size_t i = first_target - 2; i <= first_target; ++i) REQUIRE(ex.input_ids[i] < 7);
      // every scored position in the body is a value token of a repeated key
      for (size_t i = 0; i < first_target; ++i)
        if (ex.labels[i] != kIgnoreLabel) REQUIRE(ex.labels[i] == ex.input_ids[i + 1]);
    }
  }
}

TEST_CASE("MAD selective copying: tokens to copy in order after the copy token", "[mad]") {
  MadParams p = mad_baseline(MadTask::selective_copying);  // V 16, L 256, copy 16
  for (uint64_t s = 0; s < 50; ++s) {
    auto ex = mad_example(MadTask::selective_copying, p, Split::train, s);
    REQUIRE(ex.input_ids.size() == 256);
    REQUIRE(ex.input_ids[256 - 17] == 15);  // copy token
    std::vector<int64_t> content;
    for (int i = 0; i < 256 - 17; ++i) {
      if (ex.input_ids[i] != 14) content.push_back(ex.input_ids[i]);
      REQUIRE(ex.labels[i] == kIgnoreLabel);
    }
    REQUIRE(content.size() == 16);
    REQUIRE(ex.input_ids[256 - 18] != 14);  // np.insert never puts a blank after the last token
    for (int i = 0; i < 16; ++i) {
      REQUIRE(ex.input_ids[256 - 16 + i] == 14);        // trailing blanks
      REQUIRE(ex.labels[256 - 16 + i] == content[i]);  // aligned targets, in order
      REQUIRE(content[i] < 14);
    }
    REQUIRE(ex.labels[256 - 17] == kIgnoreLabel);
  }
}

TEST_CASE("MAD compression: random content, compression token, identity target", "[mad]") {
  MadParams p = mad_baseline(MadTask::compression);
  auto ex = mad_example(MadTask::compression, p, Split::test, 3);
  REQUIRE(ex.input_ids.size() == 32);
  REQUIRE(ex.input_ids.back() == 15);
  REQUIRE(ex.labels == ex.input_ids);
  for (int i = 0; i < 31; ++i) REQUIRE(ex.input_ids[i] < 15);
  auto task = TaskRegistry::instance().make("mad_compression", json::object());
  REQUIRE(task_backbone(*task) == "autoencoder");
  REQUIRE(task_backbone(*TaskRegistry::instance().make("mad_memorization", json::object())) == "language_model");
}

TEST_CASE("MAD memorization: one fixed key->value map shared by every example", "[mad]") {
  MadParams p = mad_baseline(MadTask::memorization);  // V 256: insert 255, keys [0,127), values [127,255)
  auto map = mad_memorization_map(255, 12345);
  std::set<int64_t> values;
  for (int64_t k = 0; k < 127; ++k) {
    REQUIRE(map[k] >= 127);
    REQUIRE(map[k] < 255);
    values.insert(map[k]);
  }
  REQUIRE(values.size() == 127);  // injective
  for (int64_t t = 127; t < 255; ++t) REQUIRE(map[t] == -1);
  for (Split split : {Split::train, Split::test})
    for (uint64_t s = 0; s < 20; ++s) {
      auto ex = mad_example(MadTask::memorization, p, split, s);
      REQUIRE(ex.input_ids.size() == 32);
      for (int i = 0; i < 32; i += 2) {
        REQUIRE(ex.input_ids[i + 1] == 255);
        REQUIRE(ex.labels[i] == kIgnoreLabel);
        REQUIRE(ex.labels[i + 1] == map[ex.input_ids[i]]);  // no shift: target at INSERT
      }
    }
  REQUIRE(mad_memorization_map(255, 1) != map);  // the map follows kv_map_seed
  MadParams q = p;
  q.kv_map_seed = 1;
  auto other = mad_memorization_map(255, 1);
  auto ex = mad_example(MadTask::memorization, q, Split::train, 0);
  REQUIRE(ex.labels[1] == other[ex.input_ids[0]]);
}

TEST_CASE("MAD difficulty grids and parameters follow mad-lab's configs", "[mad]") {
  std::map<std::string, size_t> expected = {{"in_context_recall", 11},       {"noisy_in_context_recall", 14},
                                            {"fuzzy_in_context_recall", 11}, {"selective_copying", 13},
                                            {"compression", 11},             {"memorization", 6}};
  for (MadTask t : mad_tasks()) {
    auto settings = mad_difficulty_settings(t);
    REQUIRE(settings.size() == expected.at(mad_task_name(t)));
    REQUIRE(settings[0] == json::object());
    for (size_t i = 1; i < settings.size(); ++i) {
      REQUIRE(settings[i].size() == 1);  // one variable changed from the baseline
      json task_part = settings[i];
      task_part.erase("n_train");
      REQUIRE_NOTHROW(mad_params_from_json(t, task_part));  // every setting is valid
    }
  }
  REQUIRE(mad_baseline_n_train(MadTask::memorization) == 256);
  REQUIRE(mad_baseline(MadTask::noisy_in_context_recall).noise_vocab_size == 16);
  REQUIRE_THROWS_WITH(mad_params_from_json(MadTask::selective_copying, {{"seq_len", 20}}),
                      Catch::Contains("seq_len (20) must be > 2 * num_tokens_to_copy + 1"));
  REQUIRE_THROWS_WITH(mad_params_from_json(MadTask::compression, {{"num_tokens_to_copy", 3}}),
                      Catch::Contains("unknown parameter 'num_tokens_to_copy'"));
  REQUIRE_THROWS_WITH(mad_params_from_json(MadTask::in_context_recall, {{"frac_noise", 0.5}}),
                      Catch::Contains("noise_vocab_size must be > 0"));
  REQUIRE_THROWS_WITH(mad_params_from_json(MadTask::fuzzy_in_context_recall, {{"vocab_size", 6}}),
                      Catch::Contains("key and"));
}

TEST_CASE("MAD tasks are registered with mad-lab baselines and resolve the `mad` alias", "[mad]") {
  auto& reg = TaskRegistry::instance();
  for (MadTask t : mad_tasks()) {
    const std::string name = "mad_" + mad_task_name(t);
    REQUIRE(reg.has(name));
    REQUIRE(reg.at(name).trainable);
    REQUIRE(resolve_task_alias("mad", {{"task", mad_task_name(t)}}) == name);
  }
  auto task = reg.make("mad_selective_copying", {{"vocab_size", 32}});
  auto* tt = dynamic_cast<TokenTask*>(task.get());
  REQUIRE(tt);
  REQUIRE(tt->vocab_size() == 32);
  REQUIRE(tt->seq_len() == 256);
  REQUIRE(tt->params()["num_tokens_to_copy"] == 16);
  auto rows = task->generate_rows(Split::test, 3, 5);
  REQUIRE(rows.size() == 3);
  REQUIRE(rows[0]["input_ids"].size() == 256);
  REQUIRE(dynamic_cast<TokenTask*>(reg.make("mad_in_context_recall", json::object()).get())->seq_len() == 127);
  REQUIRE(resolve_task_alias("mad", {{"task", "selective-copying"}}) == "mad_selective_copying");
  REQUIRE(resolve_task_alias("mqar", json::object()) == "mqar");
  REQUIRE_THROWS_WITH(resolve_task_alias("mad", json::object()), Catch::Contains("needs --task"));
  REQUIRE_THROWS_WITH(resolve_task_alias("mad", {{"task", "copying"}}), Catch::Contains("unknown MAD task 'copying'"));
  REQUIRE_THROWS_WITH(reg.make("mad_memorization", {{"seq_len", 31}}), Catch::Contains("seq_len must be even"));
}

TEST_CASE("MAD accuracy: macro per batch (mad-lab), macro, micro and per-example on hand-made cases", "[mad]") {
  // (pred, label): ex1 (0,0) (2,1) [3 at an ignored position]; ex2 (1,1) (1,1) (1,2)
  const std::vector<std::vector<int64_t>> preds = {{0, 2, 3}, {1, 1, 1}};
  const std::vector<std::vector<int64_t>> labels = {{0, 1, kIgnoreLabel}, {1, 1, 2}};
  auto whole = mad_accuracy(preds, labels, 4, 128);
  CHECK(whole.micro == Approx(3.0 / 5.0));
  CHECK(whole.example_mean == Approx((1.0 / 2.0 + 2.0 / 3.0) / 2.0));
  // recall: class 0 1/1, class 1 2/3, class 2 0/1 (predicted once); class 3 only at an ignored
  // position -> excluded
  CHECK(whole.macro == Approx((1.0 + 2.0 / 3.0 + 0.0) / 3.0));
  CHECK(whole.macro_batched == Approx(whole.macro));  // one batch
  REQUIRE(whole.n_labels == 5);
  // batches of one example: ex1 classes {0: 1, 1: 0, 2: 0 (only predicted)} -> 1/3;
  // ex2 classes {1: 2/2, 2: 0/1} -> 1/2; equal batch weights
  auto per_one = mad_accuracy(preds, labels, 4, 1);
  CHECK(per_one.macro_batched == Approx((1.0 / 3.0 + 1.0 / 2.0) / 2.0));
  CHECK(per_one.macro == Approx(whole.macro));
  // a partial last batch weighs by its size: batches {ex1, ex2} and {ex3 all correct}
  auto three_p = preds, three_l = labels;
  three_p.push_back({3, 3});
  three_l.push_back({3, 3});
  auto partial = mad_accuracy(three_p, three_l, 4, 2);
  CHECK(partial.macro_batched == Approx((2.0 * whole.macro + 1.0 * 1.0) / 3.0));
  // perfect predictions score 1 everywhere
  auto perfect = mad_accuracy({{0, 1, 2}}, {{0, 1, 2}}, 3, 128);
  CHECK(perfect.macro_batched == 1.0);
  CHECK(perfect.micro == 1.0);
  REQUIRE_THROWS_WITH(mad_accuracy({{0}}, {{5}}, 4, 128), Catch::Contains("outside [0, 4)"));
  REQUIRE_THROWS_WITH(mad_accuracy({{0}}, {{0}, {1}}, 4, 128), Catch::Contains("1 predictions for 2 examples"));
}

TEST_CASE("MAD accuracy of a model: evaluate_mad_accuracy batches argmax predictions", "[mad]") {
  auto examples = make(MadTask::selective_copying, {{"seq_len", 40}, {"num_tokens_to_copy", 4}}, Split::test, 10);
  // an oracle that puts the mass on the label (or on token 0 where unlabelled)
  std::map<std::vector<int64_t>, std::vector<int64_t>> answer;
  for (const auto& e : examples) answer[e.input_ids] = e.labels;
  auto oracle = [&](const torch::Tensor& ids) {
    auto out = torch::zeros({ids.size(0), ids.size(1), 16});
    for (int64_t b = 0; b < ids.size(0); ++b) {
      std::vector<int64_t> row(ids[b].data_ptr<int64_t>(), ids[b].data_ptr<int64_t>() + ids.size(1));
      const auto& lab = answer.at(row);
      for (int64_t t = 0; t < ids.size(1); ++t) out[b][t][lab[t] == kIgnoreLabel ? 0 : lab[t]] = 1.0;
    }
    return out;
  };
  auto acc = evaluate_mad_accuracy(oracle, examples, 16, torch::kCPU, 4);
  REQUIRE(acc.macro_batched == 1.0);
  REQUIRE(acc.n_labels == 40);
  auto constant = [](const torch::Tensor& ids) {
    auto out = torch::zeros({ids.size(0), ids.size(1), 16});
    out.select(2, 3).fill_(1.0);
    return out;
  };
  auto c = evaluate_mad_accuracy(constant, examples, 16, torch::kCPU, 128);
  int64_t threes = 0;
  for (const auto& e : examples)
    for (auto l : e.labels) threes += l == 3;
  CHECK(c.micro == Approx(threes / 40.0));
  // macro: only class 3 has recall 1; every other present class has 0
  std::set<int64_t> classes = {3};
  for (const auto& e : examples)
    for (auto l : e.labels)
      if (l != kIgnoreLabel) classes.insert(l);
  CHECK(c.macro_batched == Approx((threes > 0 ? 1.0 : 0.0) / classes.size()));
}

TEST_CASE("MAD leakage check counts distinct test inputs found in the training set", "[mad]") {
  std::vector<TokenExample> train(2), test(3);
  train[0].input_ids = {1, 2};
  train[1].input_ids = {3, 4};
  test[0].input_ids = {1, 2};
  test[1].input_ids = {1, 2};  // duplicates count once (mad-lab compares sets)
  test[2].input_ids = {5, 6};
  REQUIRE(fraction_of_test_in_train(train, test) == Approx(0.5));
}

TEST_CASE("MAD compression autoencoder: decode from the last token's code, it learns a tiny task", "[mad]") {
  auto table = sincos_position_table(5, 8);  // half 4, f_i = 10000^(-i/3)
  REQUIRE(table.sizes() == torch::IntArrayRef({5, 8}));
  CHECK(table[0][0].item<double>() == Approx(0.0));
  CHECK(table[0][4].item<double>() == Approx(1.0));
  CHECK(table[3][0].item<double>() == Approx(std::sin(3.0)).epsilon(1e-6));
  CHECK(table[2][5].item<double>() == Approx(std::cos(2.0 * std::pow(10000.0, -1.0 / 3.0))).epsilon(1e-6));

  torch::manual_seed(0);
  ModelConfig cfg;
  cfg.model = "transformer";
  cfg.vocab_size = 6;
  cfg.d_model = 32;
  cfg.n_layers = 1;
  cfg.n_heads = 2;
  cfg.mixer_args = json::object();
  MadAutoEncoder ae(cfg);
  auto ids = torch::tensor({0, 1, 2, 5, 3, 4, 0, 5}, torch::kInt64).reshape({2, 4});
  auto logits = ae->forward(ids);
  REQUIRE(logits.sizes() == torch::IntArrayRef({2, 4, 6}));
  REQUIRE(torch::allclose(logits, ae->decode(ae->encode(ids), 4)));
  ModelState st;
  REQUIRE_THROWS_WITH(ae->forward(ids, &st), Catch::Contains("no decode state"));

  // compression with V = 6 (content tokens 0..4), L = 3: 25 sequences; Adam learns them.
  MadParams p;
  p.vocab_size = 6;
  p.seq_len = 3;
  std::vector<TokenExample> data;
  for (uint64_t s = 0; s < 256; ++s) data.push_back(mad_example(MadTask::compression, p, Split::train, s));
  std::vector<int64_t> flat_ids, flat_labels;
  for (const auto& e : data) {
    flat_ids.insert(flat_ids.end(), e.input_ids.begin(), e.input_ids.end());
    flat_labels.insert(flat_labels.end(), e.labels.begin(), e.labels.end());
  }
  auto X = torch::tensor(flat_ids, torch::kInt64).reshape({256, 3});
  auto Y = torch::tensor(flat_labels, torch::kInt64).reshape({256, 3});
  torch::optim::Adam opt(ae->parameters(), torch::optim::AdamOptions(3e-3));
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(ae->forward(X).reshape({-1, 6}), Y.reshape({-1}));
    loss.backward();
    opt.step();
  }
  auto acc = evaluate_mad_accuracy([&](const torch::Tensor& x) { return ae->forward(x); }, data, 6, torch::kCPU);
  CHECK(acc.micro > 0.9);
}

TEST_CASE("MAD score: best over lr x wd per setting, mean over settings and tasks, report section", "[mad]") {
  auto dir = test::temp_dir("mad_score");
  const std::string db_path = (dir / "r.sqlite").string();
  {
    ResultsDB db(db_path);
    // (model, task, overrides, lr, test metrics by step: {loss, accuracy})
    auto add_run = [&](const std::string& model, const std::string& task, json cfg, double lr,
                       const std::vector<std::tuple<int64_t, double, double>>& evals) {
      RunInfo r;
      r.model = model;
      r.task = task;
      cfg["model"] = model;
      cfg["task"] = task;
      cfg["lr"] = lr;
      cfg["weight_decay"] = 0.0;
      cfg["d_model"] = 128;
      cfg["n_layers"] = 2;
      r.config_json = cfg.dump();
      r.config_hash = std::to_string(lr) + cfg.dump();
      int64_t id = db.create_run(r);
      std::vector<MetricRow> rows;
      for (const auto& [step, loss, acc] : evals) {
        rows.push_back({id, step, "test", "loss", loss, 0});
        rows.push_back({id, step, "test", "accuracy", acc, 0});
      }
      db.add_metrics(rows);
      db.set_run_status(id, "completed");
    };
    // compression baseline: lr 1e-3 has its lowest test loss at step 200 (acc 0.6, final 0.9)
    add_run("transformer", "mad_compression", {{"n_train", 12800}}, 1e-3, {{100, 1.0, 0.2}, {200, 0.5, 0.6}, {300, 0.8, 0.9}});
    add_run("transformer", "mad_compression", {{"n_train", 12800}}, 1e-4, {{100, 0.9, 0.4}, {200, 0.7, 0.5}});
    add_run("transformer", "mad_compression", {{"n_train", 12800}, {"vocab_size", 32}}, 1e-3, {{100, 2.0, 0.3}});
    add_run("transformer", "mad_memorization", {{"n_train", 256}}, 1e-3, {{10, 1.0, 0.8}});
    add_run("transformer", "mad_memorization", {{"n_train", 800}}, 1e-3, {{10, 1.0, 0.4}});
    add_run("gated_deltanet", "mad_memorization", {{"n_train", 256}}, 1e-3, {{10, 1.0, 0.7}});
  }
  ResultsDB db(db_path);
  auto data = mad_runs_from_db(db, report_catalog());
  REQUIRE(data.accuracy_metric == "accuracy");
  REQUIRE(data.runs.size() == 6);
  auto scores = compute_mad_scores(data.runs);
  const auto& tf = scores.at("transformer");
  REQUIRE(tf.tasks.at("compression").settings.at("baseline").best == Approx(0.6));  // lowest-loss checkpoint
  REQUIRE(tf.tasks.at("compression").settings.at("vocab_size=32").best == Approx(0.3));
  REQUIRE(tf.tasks.at("compression").score == Approx((0.6 + 0.3) / 2));
  REQUIRE(tf.tasks.at("memorization").settings.count("n_train=800") == 1);
  REQUIRE(tf.tasks.at("memorization").score == Approx((0.8 + 0.4) / 2));
  REQUIRE(tf.mad_score == Approx((0.45 + 0.6) / 2));
  REQUIRE(std::isnan(tf.atlas_average));  // not all five Atlas columns
  REQUIRE(scores.at("gated_deltanet").mad_score == Approx(0.7));
  auto final_sel = compute_mad_scores(mad_runs_from_db(db, report_catalog(), MadSelection::final).runs);
  REQUIRE(final_sel.at("transformer").tasks.at("compression").settings.at("baseline").best == Approx(0.9));
  REQUIRE(mad_setting_label(report_catalog()["mad"]["noisy_in_context_recall"]["baseline"], {{"frac_noise", 0.4}, {"vocab_size", 32}}) == "frac_noise=0.4");

  if (gnuplot_available()) {
    auto md = read_text_file(write_report(db, (dir / "report").string(), report_catalog()));
    REQUIRE(md.find("## MAD synthetic tasks") != std::string::npos);
    REQUIRE(md.find("| transformer | 45.0 (2/11 settings)") != std::string::npos);
    REQUIRE(md.find("75.46") != std::string::npos);  // the Atlas reference table
  }
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("configs/mad.json is mad-lab's benchmark grid and mad_quick.json a small version of it", "[mad]") {
  const json sweep = read_json_file(std::string(MNEMO_SOURCE_DIR) + "/configs/mad.json");
  auto cells = expand_sweep(sweep);
  const size_t models = sweep["grid"]["model"].size();
  REQUIRE(cells.size() == 66 * 3 * 2 * models);
  std::map<std::string, std::set<std::string>> settings;
  for (const auto& c : sweep["cases"]) {
    const std::string task = c["task"];
    json params = json::object();
    for (auto it = c.begin(); it != c.end(); ++it)
      if (it.key() != "task" && it.key() != "steps" && it.key() != "eval_every") params[it.key()] = it.value();
    settings[task.substr(4)].insert(mad_setting_label(report_catalog()["mad"][task.substr(4)]["baseline"], params));
    REQUIRE(c["steps"] == c["n_train"].get<int64_t>() * 200 / 128);  // 200 epochs of batch 128
    json cell = sweep["base"];
    cell.update(c);
    cell["model"] = "transformer";  // every case resolves (the model grid is checked by `mnemo sweep`)
    REQUIRE_NOTHROW(resolve_run_config(cell));
  }
  for (MadTask t : mad_tasks()) {
    std::set<std::string> expected;
    for (const auto& s : mad_difficulty_settings(t)) {
      json p = s;
      if (!p.contains("n_train")) p["n_train"] = mad_baseline_n_train(t);
      expected.insert(mad_setting_label(report_catalog()["mad"][mad_task_name(t)]["baseline"], p));
    }
    REQUIRE(settings[mad_task_name(t)] == expected);
  }
  const json quick = read_json_file(std::string(MNEMO_SOURCE_DIR) + "/configs/mad_quick.json");
  auto quick_cells = expand_sweep(quick);
  REQUIRE(quick_cells.size() == 6);
  for (const auto& c : quick_cells) REQUIRE_NOTHROW(resolve_run_config(c));
}
