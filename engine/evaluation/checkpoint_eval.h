// What every evaluation of a checkpoint shares, whichever tasks it runs: the tokenizer it may use, the run the
// checkpoint came from, and the sink that stores its cells as `evals` rows.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "results/db.h"
#include "tasks/eval_task.h"
#include "tasks/tokenizer.h"

namespace mnemo {

// The tokenizer an evaluation of checkpoint `ckpt` (config.json `cfg`) uses: `spec` (--tokenizer) when given, else
// the one its config records (an `lm` run's corpus tokenizer "sp-bpe:N" rebuilt or reused from the cache as
// training did). A `spec` that is not the recorded tokenizer (compared by Tokenizer::id(): the same file under
// another path is the same) is refused, naming both: the checkpoint's token ids mean the recorded tokenizer's
// pieces, and another with the same vocabulary size runs but scores the wrong text. With allow_other it is used,
// and `other` is set: the evals rows then name the tokenizer in their cell (eval_rows_sink's setting_extra), so
// they do not replace the rows scored with the checkpoint's own.
struct CheckpointTokenizer {
  std::shared_ptr<Tokenizer> tokenizer;
  bool other = false;
};
CheckpointTokenizer checkpoint_tokenizer(const json& cfg, const std::string& spec, const std::string& ckpt,
                                         bool allow_other, const std::function<void(const std::string&)>& log);

// The sink of EvalContext::record that stores cells as `evals` rows of `db` (one transaction),
// tagged with the model name, checkpoint path and run id; a cell evaluated before is replaced
// (ResultsDB::put_evals) unless keep_previous. `setting_extra` (an object) is added to every cell's setting.
std::function<void(const std::vector<EvalCell>&)> eval_rows_sink(ResultsDB& db, const std::string& model_name,
                                                                  const std::string& checkpoint, int64_t run_id = 0,
                                                                  bool keep_previous = false,
                                                                  const json& setting_extra = json::object());

// The parameters of task `task_name` when evaluating checkpoint config `cfg`: the ones it was trained with when it
// trained on that task (lm_ppl on an `lm` checkpoint: the same corpus, tokenizer and context), else none (the task's
// defaults); `overrides` on top.
json checkpoint_task_params(const std::string& task_name, const json& cfg, const json& overrides = json::object());

// The run of `db` whose model a checkpoint holds, 0 if none: the run id the trainer wrote into the
// checkpoint when `db` has that run with the same config hash or run folder; else the newest run of
// that folder; else the only completed run with the checkpoint's config hash.
int64_t checkpoint_run_id(ResultsDB& db, const std::string& checkpoint);

}  // namespace mnemo
