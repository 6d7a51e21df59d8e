// Language modelling on a text corpus (docs/tasks.md#language-modelling): the `lm` task trains on
// windows of a token shard of the corpus's training documents and validates on its held-out
// documents; `lm_ppl` evaluates a checkpoint's perplexity per evaluation length and per position
// bucket (length extrapolation, docs/tasks.md#language-modelling). Data: tasks/corpus.h, tasks/token_shard.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/corpus.h"
#include "tasks/eval_task.h"
#include "tasks/task.h"
#include "tasks/token_shard.h"
#include "tasks/tokenizer.h"

namespace mnemo {

using LogFn = std::function<void(const std::string&)>;

// Everything a run reads, built once (tokenizer trained/loaded, shards built or reused).
struct LmData {
  std::shared_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenShard> train, validation;  // train is null for an evaluation-only use
  std::vector<int32_t> byte_lengths;              // bytes of text per token id (bits per byte)
  std::string corpus_label, validation_label;     // e.g. "gutenberg", "gutenberg (held out: every 10th document)"
};

class LmTask : public Task {
 public:
  explicit LmTask(const json& params, std::string name = "lm");
  std::string name() const override { return name_; }
  json params() const override { return params_; }
  std::vector<json> generate_rows(Split split, int64_t n, uint64_t seed) const override;

  int64_t seq_len() const { return params_.at("seq_len").get<int64_t>(); }
  CorpusSpec train_corpus() const;
  // The held-out documents of the corpus, or every document of `val_corpus` when that is set.
  CorpusSpec validation_corpus() const;
  CorpusSplit validation_split() const;
  std::string cache_dir() const;  // `cache_dir`, else $MNEMO_CACHE_DIR, else out/cache
  std::shared_ptr<Tokenizer> tokenizer(const LogFn& log) const;
  // Builds or reuses the shards; with_train = false skips the training shard. `tokenizer` given: the shards in its
  // tokens instead of the task's `tokenizer` parameter's.
  LmData prepare(const LogFn& log, bool with_train = true, std::shared_ptr<Tokenizer> tokenizer = nullptr) const;

 protected:
  json params_;
  std::string name_;
};

// The `lm_ppl` evaluation: options lengths, max_tokens, bucket, chunk, batch_size (eval_options_help); its documents
// and requests: tasks/lm_ppl_evaluation.h.
class LmPplTask : public LmTask, public EvalTask {
 public:
  explicit LmPplTask(const json& params) : LmTask(params, "lm_ppl") {}
  std::unique_ptr<harness::HarnessTask> evaluation(const EvalContext& ctx, std::shared_ptr<const Task> self) const override;
  json eval_options_help() const override;
  double score_prediction(const json& row, const std::string& mode, const std::string& where) const override;
  std::string score_metric(const std::string& mode) const override { return "ppl"; }
};

}  // namespace mnemo
