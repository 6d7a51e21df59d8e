// Tasks that evaluate a trained model by generation (S-NIAH, BABILong): `mnemo eval` builds an
// EvalContext around the checkpoint's model and calls EvalTask::evaluate, which generates the
// samples, decodes greedily (runtime/generation.h), scores with tasks/scoring.h and writes one
// EvalRow per (task, metric, setting) to the results DB.
//
// EvalTask is an interface mixed into a Task subclass; find it with
//   auto* ev = dynamic_cast<EvalTask*>(task.get());
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "results/db.h"
#include "runtime/common.h"
#include "runtime/model.h"
#include "tasks/task.h"
#include "tasks/tokenizer.h"

namespace mnemo {

struct EvalContext {
  explicit EvalContext(LanguageModelImpl& m) : model(m) {}
  LanguageModelImpl& model;
  // The model's tokenizer; null = the task's configured `tokenizer` parameter.
  std::shared_ptr<Tokenizer> tokenizer;
  torch::Device device = torch::kCPU;
  // Evaluation options (task-specific keys, see EvalTask::eval_options_help), e.g.
  // {"lengths": [1024, 2048], "depths": [0, 50, 100], "n": 20, "seed": 42}. Lists may also be
  // given as comma-separated strings ("1024,2048").
  json options = json::object();
  ResultsDB* db = nullptr;  // null: results are only returned
  int64_t run_id = 0;       // training run of the checkpoint (0 if none)
  std::string model_name;   // EvalRow.model
  std::string checkpoint;   // EvalRow.checkpoint
  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

class EvalTask {
 public:
  virtual ~EvalTask() = default;
  // Runs the evaluation; returns {"task", "metric", "cells": [{setting..., "value", "n"}], ...}
  // and, when ctx.db is set, writes the same cells as EvalRows (one transaction).
  virtual json evaluate(EvalContext& ctx) const = 0;
  // Option name -> one-line help, for `mnemo eval --help`-style listings.
  virtual json eval_options_help() const = 0;
};

// ---- helpers shared by the text tasks ----

// A list option: JSON array of ints, a single int, or "a,b,c"; `fallback` if the key is absent.
std::vector<int64_t> option_int_list(const json& options, const std::string& key, const std::vector<int64_t>& fallback);
int64_t option_int(const json& options, const std::string& key, int64_t fallback);
std::string option_string(const json& options, const std::string& key, const std::string& fallback);

// Training example for prompt -> answer (spec tasks.md §1.2 encoding, §4.4 fine-tune format):
// S = [BOS] + encode(prompt + answer) + [EOS]; the answer tokens are those after
// len(encode(prompt)) (trailing whitespace of the prompt moves to the answer first).
// input_ids = S[:-1], labels[i] = S[i+1] on answer/EOS positions, -100 elsewhere; right-padded
// with the pad id (labels -100) to seq_len. std::nullopt if S has more than seq_len + 1 tokens.
std::optional<TokenExample> make_answer_example(const Tokenizer& tok, const std::string& prompt,
                                                const std::string& answer, int64_t seq_len);
// Number of tokens the model sees for `prompt` (BOS included when the tokenizer has one).
int64_t prompt_token_count(const Tokenizer& tok, const std::string& prompt);

// Greedy answer of the model to a text prompt: encode_with_bos(prompt), generate until EOS, a stop
// string (the output is cut before it) or max_new_tokens; returns the decoded text.
std::string generate_text(EvalContext& ctx, const Tokenizer& tok, const std::string& prompt, int64_t max_new_tokens,
                          const std::vector<std::string>& stop_strings);

// The tokenizer an evaluation uses: ctx.tokenizer if set, else load_tokenizer(spec); Error when
// its vocabulary does not fit the model's.
std::shared_ptr<Tokenizer> eval_tokenizer(const EvalContext& ctx, const std::string& spec);

// Writes rows to ctx.db (if set), filling run/model/checkpoint/created_at.
void write_eval_rows(EvalContext& ctx, std::vector<EvalRow> rows);

}  // namespace mnemo
