// MQAR as a registered token task (docs/tasks.md#mqar), optionally a mixture of key-value counts.
//
// Zoology trains on a mixture of MQAR settings and reports test accuracy per `num_kv_pairs` slice
// (HazyResearch/zoology, experiments/paper_configs/arxiv24_based_figure2/configs.py: train_configs
// (64, 4) x 100k + (128, 8), (256, 16/32/64) x 20k each; test_configs N_KV = 4 ... 256;
// slice_keys = ["num_kv_pairs"]). The mechanism that recalls (an induction head, a delta-rule
// write) forms on the easy examples and is then needed, not relearnt, on the hard ones. Here the
// mixture shares one seq_len (no padding): train example i draws its N_KV from
// `train_num_kv_pairs` with probability ∝ `train_kv_weights`; test example i takes
// `test_num_kv_pairs[i mod n]` (equal slices); test metrics add `accuracy_nkv<N>` per slice.
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "synthetic/mqar.h"
#include "tasks/task.h"
#include "tasks/scoring.h"
#include "tasks/token_batch.h"

namespace mnemo {
namespace {

class MqarTask : public TokenTask {
 public:
  explicit MqarTask(const json& params) : params_(params) {
    p_.vocab_size = params.at("vocab_size").get<int64_t>();
    p_.seq_len = params.at("seq_len").get<int64_t>();
    p_.num_kv_pairs = params.at("num_kv_pairs").get<int64_t>();
    p_.power_a = params.at("power_a").get<double>();
    p_.num_passes = params.at("num_passes").get<int64_t>();
    p_.random_non_queries = params.at("random_non_queries").get<bool>();
    validate(p_);
    train_kv_ = kv_list(params, "train_num_kv_pairs");
    test_kv_ = kv_list(params, "test_num_kv_pairs");
    for (const json& w : params.at("train_kv_weights")) {
      if (!w.is_number() || !(w.get<double>() > 0) || !std::isfinite(w.get<double>()))
        throw Error("mqar: train_kv_weights must hold positive numbers, got " + json_excerpt(params.at("train_kv_weights")));
      train_w_.push_back(w.get<double>());
    }
    if (!train_w_.empty() && train_w_.size() != train_kv_.size())
      throw Error("mqar: train_kv_weights has " + std::to_string(train_w_.size()) + " entries for " +
                  std::to_string(train_kv_.size()) + " train_num_kv_pairs");
    if (train_w_.empty()) train_w_.assign(train_kv_.size(), 1.0);
  }
  std::string name() const override { return "mqar"; }
  json params() const override { return params_; }
  int64_t vocab_size() const override { return p_.vocab_size; }
  int64_t seq_len() const override { return p_.seq_len; }
  std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const override {
    std::vector<TokenExample> out;
    out.reserve(n);
    const bool mixture = split == Split::train ? !train_kv_.empty() : !test_kv_.empty();
    std::discrete_distribution<size_t> pick(train_w_.begin(), train_w_.end());
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t s = example_seed(split, seed, i);
      if (!mixture) {
        out.push_back(mqar_example(p_, s));
        continue;
      }
      MqarParams p = p_;
      if (split == Split::test) {
        p.num_kv_pairs = test_kv_[static_cast<size_t>(i) % test_kv_.size()];
      } else {
        std::mt19937_64 rng(s ^ 0x9e3779b97f4a7c15ull);  // the choice of N_KV, independent of the example's draws
        auto d = pick;
        p.num_kv_pairs = train_kv_[d(rng)];
      }
      TokenExample ex = mqar_example(p, s);
      ex.meta = {{"num_kv_pairs", p.num_kv_pairs}};
      out.push_back(std::move(ex));
    }
    return out;
  }
  // Accuracy per num_kv_pairs slice (Zoology's slice_keys), example-weighted within a slice.
  json test_metrics_of(const std::vector<TokenExample>& test,
                       const std::vector<std::vector<int64_t>>& predictions) const override {
    if (test_kv_.empty()) return json::object();
    if (predictions.size() != test.size())
      throw Error("mqar: " + std::to_string(predictions.size()) + " predictions for " + std::to_string(test.size()) +
                  " test examples");
    std::map<int64_t, std::pair<double, int64_t>> slices;  // N_KV -> (sum of accuracies, examples)
    for (size_t e = 0; e < test.size(); ++e) {
      const double a = example_accuracy(predictions[e], test[e].labels);
      if (std::isnan(a) || !test[e].meta.contains("num_kv_pairs")) continue;
      auto& sl = slices[test[e].meta["num_kv_pairs"].get<int64_t>()];
      sl.first += a;
      ++sl.second;
    }
    json out = json::object();
    for (const auto& [nkv, sl] : slices) out["accuracy_nkv" + std::to_string(nkv)] = sl.first / sl.second;
    return out;
  }
  std::vector<std::string> test_metric_names() const override {
    std::set<int64_t> kv(test_kv_.begin(), test_kv_.end());
    std::vector<std::string> names;
    for (int64_t n : kv) names.push_back("accuracy_nkv" + std::to_string(n));
    return names;
  }

 private:
  // A list of key-value counts, each valid at this seq_len and vocabulary (throws naming the key).
  std::vector<int64_t> kv_list(const json& params, const char* key) const {
    std::vector<int64_t> out;
    for (const json& v : params.at(key)) {
      if (!v.is_number_integer()) throw Error(std::string("mqar: ") + key + " must hold integers, got " + json_excerpt(params.at(key)));
      MqarParams p = p_;
      p.num_kv_pairs = v.get<int64_t>();
      try {
        validate(p);
      } catch (const Error& e) {
        throw Error(std::string("mqar: ") + key + " entry " + std::to_string(p.num_kv_pairs) + ": " + e.what());
      }
      out.push_back(p.num_kv_pairs);
    }
    return out;
  }

  json params_;
  MqarParams p_;
  std::vector<int64_t> train_kv_, test_kv_;  // empty: every example has num_kv_pairs
  std::vector<double> train_w_;
};

}  // namespace

void register_mqar_task(TaskRegistry& r) {
  TaskFamily f;
  f.name = "mqar";
  f.description = "Zoology multi-query associative recall (docs/tasks.md#mqar): accuracy on the queried values";
  MqarParams d;
  f.defaults = {{"vocab_size", d.vocab_size}, {"seq_len", d.seq_len},   {"num_kv_pairs", d.num_kv_pairs},
                {"power_a", d.power_a},       {"num_passes", d.num_passes},
                {"random_non_queries", d.random_non_queries},
                {"train_num_kv_pairs", json::array()},
                {"train_kv_weights", json::array()},
                {"test_num_kv_pairs", json::array()}};
  f.help = {{"vocab_size", "V: keys from [1, V/2), values from [V/2, V); V > seq_len"},
            {"seq_len", "L: input length (even)"},
            {"num_kv_pairs", "N: key-value pairs in the context; 4N <= L"},
            {"power_a", "power-law exponent a of the query-gap distribution p(g) ∝ a (g+1)^(a-1)"},
            {"num_passes", "times the key-value context is repeated (JRT-style)"},
            {"random_non_queries", "fill non-query positions with random tokens instead of 0"},
            {"train_num_kv_pairs", "Zoology's training mixture: N_KV of each training example drawn from this list "
                                   "(empty: num_kv_pairs)"},
            {"train_kv_weights", "relative frequency of each train_num_kv_pairs entry (empty: equal)"},
            {"test_num_kv_pairs", "test slices: example i has entry i mod n; adds test metrics accuracy_nkv<N> "
                                  "(empty: num_kv_pairs)"}};
  f.trainable = true;
  f.evaluation = "token_predictions";
  f.make = [](const json& p) { return std::make_shared<MqarTask>(p); };
  r.add(std::move(f));
}

}  // namespace mnemo
