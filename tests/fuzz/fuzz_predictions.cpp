// Fuzz target: predictions JSONL (`mnemo score --task T --predictions F`), scored by the task's own scorer
// (engine/score -> EvalTask::score_prediction of S-NIAH, BABILong, lm_ppl).
// Input: byte 0 picks the task and the mode; the rest is the predictions file.
#include "engine/evaluation/score.h"
#include "fuzz_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kTasks[] = {"sniah_1", "sniah_2", "sniah_3", "babilong_qa3",
                                       "babilong_qa1", "babilong_qa2", "babilong_qa8", "babilong_qa19", "mqar",
                                       "lm_ppl"};
  static const char* const kModes[] = {"strict", "substring"};
  if (size == 0) return 0;
  const char* task = kTasks[(data[0] >> 1) % (sizeof kTasks / sizeof kTasks[0])];
  const char* mode = kModes[data[0] & 1];
  return mnemo_fuzz::guarded([&] {
    (void)score_predictions(task, mnemo_fuzz::write_scratch("predictions.jsonl", data + 1, size - 1), mode);
  });
}
