// S-NIAH: RULER single needle in a haystack (docs/tasks.md#s-niah; NVIDIA/RULER niah.py).
//   sniah_1 = niah_single_1: noise haystack (repeated sentence), 7-digit number value
//   sniah_2 = niah_single_2: Paul Graham essay haystack, 7-digit number value
//   sniah_3 = niah_single_3: essay haystack, UUID value
// Keys "adjective-noun" from the wonderwords lists; needle depth from RULER's 40 depths (or fixed);
// the prompt (template + answer prefix) fills max_seq_length − tokens_to_generate tokens of the
// configured tokenizer exactly (the largest haystack that fits); greedy decoding, string_match_all.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tasks/eval_task.h"
#include "tasks/task.h"
#include "tasks/text_utils.h"
#include "tasks/tokenizer.h"

namespace mnemo {

// RULER's depths: round(linspace(0, 100, 40)).
const std::vector<int64_t>& ruler_depths();

struct SniahSample {
  std::string input;         // template with context, question and answer prefix
  std::string key, value;    // the needle's key and value (the reference answer)
  int64_t depth = 0;         // percent (for the noise haystack with a random position: the effective one)
  int64_t haystack_units = 0;  // essay words or noise sentences used
  int64_t input_tokens = 0;    // tokens of `input` in the tokenizer (BOS included if it has one)
  // build_input(haystack_units, key, value, build_depth, noise_position) == input
  int64_t build_depth = 0;     // -1: noise needle at the random noise_position
  double noise_position = 0;
};

class SniahTask : public TokenTask, public GenerationTask {
 public:
  SniahTask(int variant, const json& params);  // variant 1, 2 or 3; params = defaults merged
  std::string name() const override { return "sniah_" + std::to_string(variant_); }
  json params() const override { return params_; }
  std::vector<json> generate_rows(Split split, int64_t n, uint64_t seed) const override;
  int64_t vocab_size() const override { return tok_->vocab_size(); }
  int64_t seq_len() const override { return length_; }
  std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const override;
  json eval_options_help() const override;
  // Cells lengths × depths of `n` samples each; one generate_until per sample (the prompt, no stop string:
  // RULER stops at EOS, max_gen_toks = tokens_to_generate); doc = {"outputs": [value], "depth"}.
  GenerationPlan generation_plan(const EvalContext& ctx) const override;
  // RULER: ruler_postprocess, then string_match_all against doc "outputs" (or "target"):
  // {"prediction", "target", "depth" (when the doc has one), "score"}.
  json process_results(const json& doc, const std::string& generation, const std::string& mode) const override;
  double score_prediction(const json& row, const std::string& mode, const std::string& where) const override;
  std::string score_metric(const std::string& mode) const override;

  // Sample `index`: key/value/position drawn from sample_seed(seed, index); the haystack is the
  // largest one whose prompt fits max_seq_length − tokens_to_generate tokens of `tok`.
  // depth: 0..100, or -1 = RULER's random choice.
  SniahSample make_sample(Split split, int64_t index, uint64_t seed, int64_t max_seq_length, int64_t depth,
                          const Tokenizer& tok) const;
  // The prompt for a given haystack size (exposed for the exact-fit tests).
  std::string build_input(int64_t units, const std::string& key, const std::string& value, int64_t depth,
                          double noise_position, int64_t* effective_depth = nullptr) const;
  bool essay_haystack() const { return essay_ != nullptr; }

 private:
  struct Essay;
  int variant_;
  json params_;
  std::shared_ptr<Tokenizer> tok_;
  int64_t length_, tokens_to_generate_, depth_;
  bool with_ids_;
  std::string type_;  // "number" | "uuid"
  std::shared_ptr<const Essay> essay_;  // null: noise haystack
  std::shared_ptr<const std::vector<std::string>> adjectives_, nouns_;
  std::string haystack_label_, haystack_sha256_, wordlists_sha256_;
};

void register_sniah_tasks(TaskRegistry& r);

}  // namespace mnemo
