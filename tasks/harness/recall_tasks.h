// The recall-intensive QA tasks of the Based / "Just read twice" suite (docs/tasks.md#recall-intensive-qa) at parity with
// HazyResearch/prefix-linear-attention's lm-eval fork: lm-eval-harness/lm_eval/tasks/based_{fda,swde,squadv2,
// triviaqa,nq,drop}/task.py (prompts, requests, process_results), lm_eval/api/task.py Task.truncate_context
// (--cutting_context) and lm_eval/__main__.py (which field is cut and which answers locate the cut, per task).
// The reference's code is the authority; where docs/tasks.md#recall-intensive-qa describes the reference otherwise, docs/tasks.md#recall-intensive-qa lists the difference.
// Data: <data_dir>/eval/recall/<file>.jsonl, one Hugging Face dataset row per line (fetched by the user).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/harness/harness_task.h"
#include "tasks/tokenizer.h"

namespace mnemo::harness {

enum class RecallKind { fda, swde, squad, triviaqa, nq, drop };

struct RecallTaskInfo {
  std::string name;       // mnemo's task name: fda, fda_twice, squad_completion, ...
  std::string reference;  // the reference's task name: based_fda, based_fda_twice, based_squad, ...
  RecallKind kind;
  bool twice;             // the "Just read twice" prompt (JRT)
  std::string file;       // relative to the data directory; a *_twice task reads its base task's file
};
const std::vector<RecallTaskInfo>& recall_task_infos();  // registry order: the six, then the six *_twice
std::vector<std::string> recall_task_names();
std::unique_ptr<HarnessTask> make_recall_task(const std::string& name);  // nullptr: not a recall task

// SWDE's validation_docs splits each text at this marker and keeps the rest as the document's "prompt" field.
inline constexpr const char* kSwdeMarker = "Summary of information above...";

// The task's doc_to_text on `doc`, which is changed as the reference's doc_to_text changes its dict (FDA: "text"
// loses the trailing "key:" and the surrounding "\n" / "."; SWDE: "text" cut at the marker, then loses "key:").
// Errors name `where` and the field (a missing field, an empty FDA/SWDE key).
std::string recall_doc_to_text(RecallKind kind, bool twice, json& doc, const std::string& where);

// __main__.py's choice for the task (with the launch scripts' --context_key text): the field that is cut and the
// fields whose first occurrence in it places the cut. FDA/SWDE: text, [key, value]; SQuAD: text, [value];
// NQ: context, [answers]; TriviaQA, DROP: context, [] (the cut keeps the start of the context).
struct RecallCutKeys {
  std::string context_key;
  std::vector<std::string> answer_keys;
};
RecallCutKeys recall_cut_keys(RecallKind kind);

// Task.truncate_context on one document: nullopt = skipped (an answer string used is empty or one character long);
// else the cut context. Tokens are counted as the tokenizer encodes with its special tokens (BOS first when
// add_bos) and the kept tokens decode without them. context_length - answer_length must be >= 1.
std::optional<std::string> recall_cut_context(const json& doc, const RecallCutKeys& keys, const Tokenizer& tok,
                                              bool add_bos, int64_t context_length, int64_t answer_length,
                                              const std::string& where);

}  // namespace mnemo::harness
