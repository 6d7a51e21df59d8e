// MQAR as a registered token task (spec tasks.md §7).
#include "synthetic/mqar.h"
#include "tasks/task.h"

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
  }
  std::string name() const override { return "mqar"; }
  json params() const override { return params_; }
  int64_t vocab_size() const override { return p_.vocab_size; }
  int64_t seq_len() const override { return p_.seq_len; }
  std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const override {
    std::vector<TokenExample> out;
    out.reserve(n);
    for (int64_t i = 0; i < n; ++i) out.push_back(mqar_example(p_, example_seed(split, seed, i)));
    return out;
  }

 private:
  json params_;
  MqarParams p_;
};

}  // namespace

void register_mqar_task(TaskRegistry& r) {
  TaskFamily f;
  f.name = "mqar";
  f.description = "Zoology multi-query associative recall (spec tasks.md §7): accuracy on the queried values";
  MqarParams d;
  f.defaults = {{"vocab_size", d.vocab_size}, {"seq_len", d.seq_len},   {"num_kv_pairs", d.num_kv_pairs},
                {"power_a", d.power_a},       {"num_passes", d.num_passes},
                {"random_non_queries", d.random_non_queries}};
  f.help = {{"vocab_size", "V: keys from [1, V/2), values from [V/2, V); V > seq_len"},
            {"seq_len", "L: input length (even)"},
            {"num_kv_pairs", "N: key-value pairs in the context; 4N <= L"},
            {"power_a", "power-law exponent a of the query-gap distribution p(g) ∝ a (g+1)^(a-1)"},
            {"num_passes", "times the key-value context is repeated (JRT-style)"},
            {"random_non_queries", "fill non-query positions with random tokens instead of 0"}};
  f.trainable = true;
  f.make = [](const json& p) { return std::make_shared<MqarTask>(p); };
  r.add(std::move(f));
}

}  // namespace mnemo
