// BABILong (docs/tasks.md#babilong; booydar/babilong): bAbI qa1..qa20 facts hidden at random sentence
// gaps of a distractor text up to a target length in tokens. Tasks babilong_qa1..babilong_qa20:
// `mnemo generate` rows, `mnemo eval` by greedy generation (EvalTask) and fine-tuning examples
// (TokenTask, loss on the answer tokens only) for `mnemo train`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tasks/babi.h"
#include "tasks/eval_task.h"
#include "tasks/task.h"
#include "tasks/text_utils.h"
#include "tasks/tokenizer.h"

namespace mnemo {

struct BabilongPrompt {
  const char* instruction;
  const char* examples;
  const char* post_prompt;
};
const BabilongPrompt& babilong_prompt(int task);  // booydar/babilong prompts.py texts (qa1..qa20)

// One assembled sample (docs/tasks.md#babilong).
struct BabilongSample {
  std::string context;                  // facts + distractor sentences, decoded and stripped
  std::string question, target;         // target = the bAbI answer
  std::vector<std::string> facts, references;
  std::vector<int64_t> fact_positions;  // gap index of each fact among the distractor sentences
  int64_t sample_size = 0;              // token budget of the context (0 = facts only)
  int64_t context_tokens = 0;           // tokens of `context` as finally encoded
  int64_t babi_index = 0;               // index of the question in the bAbI file
};

// docs/tasks.md#babilong: pick a bAbI question (uniformly, among those with at most sample_size / 8 facts whose
// fact tokens fit the budget), tokenise each fact and distractor sentence as " " + text, fill the
// rest of `sample_size` with distractor sentences (random book, random offset, 10·sample_size
// characters, first/last partial sentence dropped, sentences under 10 tokens skipped, the last one
// truncated to fit), and insert the facts at sorted gaps drawn with replacement.
// sample_size = 0: facts only. `corpus` may be null only then.
BabilongSample assemble_babilong_sample(const std::vector<BabiSample>& pool, const TextCorpus* corpus,
                                        const Tokenizer& tok, int64_t sample_size, SampleRng& rng);

struct BabilongPromptFlags {
  bool instruction = true, examples = true, post_prompt = true;
};
// "finetune": "{context}\nQuestion: {question}\nAnswer:" (docs/tasks.md#babilong fine-tune format).
// "prompted": "{instruction}\n\n{examples}\n\n{post_prompt}\n\n<context>\n{context}\n</context>\n\n
// Question: {question}" stripped, with the disabled parts empty (docs/tasks.md#babilong prompted format).
std::string babilong_format_prompt(int task, const std::string& format, const BabilongPromptFlags& flags,
                                   const std::string& context, const std::string& question);

// Scores one prediction with the task's scorer: mode "strict" = compare_answers (label sets),
// "substring" = target in prediction. Returns 1 or 0.
double babilong_score(int task, const std::string& mode, const std::string& prediction, const std::string& target,
                      const std::string& question);

class BabilongTask : public TokenTask, public GenerationTask {
 public:
  BabilongTask(int task, const json& params);  // params = the family's defaults merged
  std::string name() const override { return "babilong_qa" + std::to_string(task_); }
  json params() const override { return params_; }
  std::vector<json> generate_rows(Split split, int64_t n, uint64_t seed) const override;
  int64_t vocab_size() const override { return tok_->vocab_size(); }
  int64_t seq_len() const override { return length_; }
  std::vector<TokenExample> examples(Split split, int64_t n, uint64_t seed) const override;
  json eval_options_help() const override;
  // One cell per length of `n` samples; one generate_until per sample (stop "\n" in the fine-tune format, EOS only
  // in the prompted one; max_gen_toks = max_new_tokens); doc = {"target", "question"}.
  GenerationPlan generation_plan(const EvalContext& ctx) const override;
  // babilong_score(mode) on the raw generation: {"prediction", "target", "score"}.
  json process_results(const json& doc, const std::string& generation, const std::string& mode) const override;
  double score_prediction(const json& row, const std::string& mode, const std::string& where) const override;
  std::string score_metric(const std::string& mode) const override;

  struct Item {
    BabilongSample sample;
    std::string prompt;
    std::string babi_file;
  };
  // Sample `index` at context length `length` (a BABILong split such as 1000 or 4096; the context
  // budget is length − prompt_reserve, or 0 for length 0), using tokenizer `tok`.
  Item make_item(Split split, int64_t index, uint64_t seed, int64_t length, const Tokenizer& tok) const;

 private:
  int64_t sample_size_for(int64_t length) const;
  std::shared_ptr<const TextCorpus> corpus() const;
  std::string haystack_label() const;

  int task_;
  json params_;
  std::shared_ptr<Tokenizer> tok_;
  int64_t length_, prompt_reserve_, max_new_tokens_;
  std::string format_, mode_, corpus_spec_, babi_dir_;
  BabilongPromptFlags flags_;
  bool with_ids_;
};

void register_babilong_tasks(TaskRegistry& r);

}  // namespace mnemo
