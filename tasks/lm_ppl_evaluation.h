// `lm_ppl` as an evaluation task of the one task API (tasks/harness/harness_task.h): the validation stream cut, for
// every evaluation length L, into non-overlapping windows [kL, (k+1)L) (the last partial window of >= 2 tokens on its
// own); each window is a document asking one token_logprobs request (fresh state, its first token not predicted, fed
// `chunk` tokens at a time through the model's state). Per window: ppl = [Σ log p, predicted tokens] and
// bpb = [Σ log p, bytes of the predicted tokens], aggregated token-weighted (lm-eval's weighted_perplexity and
// bits_per_byte). The windows of one length are one cell (setting length, corpus, train_seq_len); the longest
// length's cell also reports the perplexity per position bucket (docs/tasks.md#language-modelling).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tasks/eval_task.h"
#include "tasks/harness/harness_task.h"
#include "tasks/lm_task.h"

namespace mnemo {

class LmPplEvaluation : public harness::HarnessTask {
 public:
  // Reads ctx.options (lengths, max_tokens, bucket, chunk; Errors for bad values), prepares the validation shard with
  // ctx.tokenizer (else the task's `tokenizer`) and checks its vocabulary against the model's.
  LmPplEvaluation(const LmPplTask& task, const EvalContext& ctx, std::shared_ptr<const Task> owner = nullptr);
  std::string name() const override { return task_.name(); }
  std::string version() const override { return "1.0"; }
  std::string output_type() const override { return "token_logprobs"; }
  std::vector<harness::MetricSpec> metrics() const override;
  int64_t num_docs() const override { return static_cast<int64_t>(windows_.size()); }
  json doc(int64_t doc_id) const override;  // {"length", "start", "tokens"}
  std::string target(const json&) const override { return ""; }
  std::vector<harness::Request> requests(int64_t doc_id) const override;
  // {"ppl": [ll, tokens], "bpb": [ll, bytes]} and, in the longest length's windows, "buckets": [[ll, tokens], ...]
  // by position bucket.
  json process_results(const json& doc, const std::vector<harness::Response>& responses) const override;
  json data_files() const override { return json::array(); }  // the cells' details name the validation stream
  bool uses_tokenizer() const override { return false; }
  json doc_setting(const json& doc) const override;
  json cell_details(const json& setting) const override;
  std::string cell_label(const json& setting) const override;
  // The predicted tokens of the cell; for the longest length, one ppl_bucket row per position bucket.
  harness::CellSummary cell_summary(const json& setting, const std::vector<json>& results) const override;
  std::shared_ptr<Tokenizer> own_tokenizer() const override { return data_.tokenizer; }

 private:
  struct Window {
    int64_t length = 0, start = 0, tokens = 0;
  };
  std::vector<int64_t> window_ids(const Window& w) const;
  const Window& window(int64_t doc_id) const;

  std::shared_ptr<const Task> owner_;
  const LmPplTask& task_;
  LmData data_;
  std::vector<Window> windows_;
  int64_t longest_ = 0, max_tokens_ = 0, bucket_ = 0, chunk_ = 0;
};

}  // namespace mnemo
