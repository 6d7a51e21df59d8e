// Tasks that evaluate a trained model (`mnemo eval --task`): the engine builds an EvalContext around the
// checkpoint's model (tasks/model_api.h), the task makes its evaluation as documents and requests of the one driver
// (EvalTask::evaluation; engine/evaluation/harness_eval.h runs it). Generation tasks (S-NIAH, BABILong:
// GenerationTask) declare their samples as lm-eval generate_until requests plus a process_results per sample
// (tasks/generation_evaluation.h); lm_ppl asks for the log-probabilities of windows of its validation stream
// (tasks/lm_ppl_evaluation.h). One EvalCell per (task, metric, setting) reaches ctx.record (the engine stores them as
// `evals` rows).
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

#include "core/common.h"
#include "tasks/harness/harness_task.h"
#include "tasks/harness/request.h"
#include "tasks/model_api.h"
#include "tasks/task.h"
#include "tasks/tokenizer.h"

namespace mnemo {

// One measured cell of an evaluation: a metric of a task at one setting (e.g. length x depth).
struct EvalCell {
  std::string task, metric;
  json setting = json::object();
  double value = 0;
  int64_t n = 0;
  json details = json::object();  // tokenizer, seeds, samples, wall time, ...
};

struct EvalContext {
  explicit EvalContext(EvalModel& m) : model(m), device(m.device()) {}
  EvalModel& model;
  // The model's tokenizer; null = the task's configured `tokenizer` parameter.
  std::shared_ptr<Tokenizer> tokenizer;
  torch::Device device = torch::kCPU;
  // Evaluation options (task-specific keys, see EvalTask::eval_options_help), e.g.
  // {"lengths": [1024, 2048], "depths": [0, 50, 100], "n": 20, "seed": 42}. Lists may also be
  // given as comma-separated strings ("1024,2048").
  json options = json::object();
  // Receives the cells of an evaluation once it has finished (the engine writes them to the
  // results DB in one transaction); may be empty (results are only returned).
  std::function<void(const std::vector<EvalCell>&)> record;
  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

class EvalTask {
 public:
  virtual ~EvalTask() = default;
  // Option name -> one-line help, for `mnemo eval --help`-style listings.
  virtual json eval_options_help() const = 0;
  // The task's scorer on one prediction made elsewhere (`mnemo score`): `row` holds "prediction" and
  // the target fields `mnemo generate` writes; `mode` selects a scorer variant ("strict" |
  // "substring" for BABILong); `where` ("file:line") prefixes every Error. A score in [0, 1].
  virtual double score_prediction(const json& row, const std::string& mode, const std::string& where) const = 0;
  // The metric name score_prediction's mean (in %) is reported as, for `mode`.
  virtual std::string score_metric(const std::string& mode) const = 0;
  // The evaluation on ctx.model as an evaluation task of the one driver, built for ctx (its options, tokenizer and
  // the model's vocabulary: Errors for bad options before anything is asked of the model). `self` is the Task this
  // interface is part of, kept alive by the result; null when the caller keeps it alive.
  virtual std::unique_ptr<harness::HarnessTask> evaluation(const EvalContext& ctx, std::shared_ptr<const Task> self) const = 0;
};

// A generation evaluation declared as data (S-NIAH, BABILong): the cells of its settings grid, each with one
// lm-eval generate_until request per sample and the sample's doc; the engine answers the requests
// (engine/evaluation/generate_until.h, the one generate_until of every task), scores each answer with
// GenerationTask::process_results and records one EvalCell per cell (tasks/generation_evaluation.h in the driver).
struct GenerationCell {
  json setting;                            // e.g. {"length": 4096, "depth": 50}
  json details;                            // the cell's details; the engine adds "wall_s" and "samples"
  std::vector<json> docs;                  // per sample: what process_results reads (target, question, ...)
  std::vector<harness::Request> requests;  // per sample: its generate_until (context, until, max_gen_toks)
  std::string label;                       // the cell in progress lines, e.g. "sniah_1 length 4096 depth 50"
};

struct GenerationPlan {
  std::string task, metric;
  std::string mode;                     // the scorer variant handed to process_results (BABILong: strict|substring)
  std::shared_ptr<Tokenizer> tokenizer;  // encodes the requests; BOS first when it has one (encode_with_bos)
  int64_t prefill_chunk = 0;            // the eval option: prompt tokens per forward (0 = the whole prompt)
  int64_t n_cells = 0;
  // Cell i, built when the engine reaches it (prompts can be long). It refers to the task: the plan must not
  // outlive the task that made it.
  std::function<GenerationCell(int64_t)> cell;
};

class GenerationTask : public EvalTask {
 public:
  // The settings grid and samples for ctx.options (lengths, depths, n, seed, ...); Errors for bad options and a
  // tokenizer that does not fit the model (checked before any generation).
  virtual GenerationPlan generation_plan(const EvalContext& ctx) const = 0;
  // lm-eval's process_results for one sample: `generation` (the model's answer to the sample's request) scored
  // against `doc`; returns the sample's record {"prediction", "target", ..., "score"} with "score" in [0, 1].
  // `mnemo score --predictions` goes through it too (score_prediction).
  virtual json process_results(const json& doc, const std::string& generation, const std::string& mode) const = 0;
  // GenerationTaskEvaluation over generation_plan(ctx) (tasks/generation_evaluation.cpp).
  std::unique_ptr<harness::HarnessTask> evaluation(const EvalContext& ctx, std::shared_ptr<const Task> self) const final;
};

// A string field of a prediction row; Error naming `where` and the field otherwise.
std::string row_string(const json& row, const std::string& key, const std::string& where);

// ---- helpers shared by the text tasks ----

// A list option: JSON array of ints, a single int, or "a,b,c"; `fallback` if the key is absent.
std::vector<int64_t> option_int_list(const json& options, const std::string& key, const std::vector<int64_t>& fallback);
int64_t option_int(const json& options, const std::string& key, int64_t fallback);
std::string option_string(const json& options, const std::string& key, const std::string& fallback);

// Training example for prompt -> answer (docs/tasks.md#evaluation-machinery encoding, docs/tasks.md#babilong fine-tune format):
// S = [BOS] + encode(prompt + answer) + [EOS]; the answer tokens are those after
// len(encode(prompt)) (trailing whitespace of the prompt moves to the answer first).
// input_ids = S[:-1], labels[i] = S[i+1] on answer/EOS positions, -100 elsewhere; right-padded
// with the pad id (labels -100) to seq_len. std::nullopt if S has more than seq_len + 1 tokens.
std::optional<TokenExample> make_answer_example(const Tokenizer& tok, const std::string& prompt,
                                                const std::string& answer, int64_t seq_len);
// Number of tokens the model sees for `prompt` (BOS included when the tokenizer has one).
int64_t prompt_token_count(const Tokenizer& tok, const std::string& prompt);

// The tokenizer an evaluation uses: ctx.tokenizer if set, else load_tokenizer(spec); Error when
// its vocabulary does not fit the model's.
std::shared_ptr<Tokenizer> eval_tokenizer(const EvalContext& ctx, const std::string& spec);

// Hands cells to ctx.record (if set).
void record_cells(EvalContext& ctx, const std::vector<EvalCell>& cells);

}  // namespace mnemo
