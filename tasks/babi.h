// bAbI v1.2 parsing (docs/tasks.md#babilong step 1; data babi/en, babi/en-10k).
// Line format "ID text"; question lines "ID question<TAB>answer<TAB>supporting IDs"; a story
// restarts when ID = 1. Every question becomes one sample whose facts are the story's non-question
// lines before it (earlier questions dropped).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/task.h"

namespace mnemo {

struct BabiSample {
  std::vector<std::string> facts;        // in story order
  std::vector<int64_t> fact_ids;         // their line IDs
  std::string question;                  // stripped (the files often end it with a space)
  std::string answer;                    // e.g. "hallway", "apple,milk" (qa8), "s,s" (qa19)
  std::vector<int64_t> supporting_ids;   // line IDs of the supporting facts
  std::vector<std::string> references;   // the supporting facts' text
  int64_t story = 0;                     // 0-based story index in the file
};

// Parses a bAbI file's text; `source` names it in error messages (file:line).
std::vector<BabiSample> parse_babi(const std::string& text, const std::string& source);

// The task's file in a bAbI folder: <dir>/qa<N>_*_<train|test>.txt (N in 1..20). The shipped
// en-10k lacks qa3's train file: [decision, docs/tasks.md#babilong] then the same file from the sibling "en"
// folder is used (reported through *fallback_used). Error if none exists.
std::string babi_task_file(int task, Split split, const std::string& babi_dir, bool* fallback_used = nullptr);

// Cached parse of a file (samples are shared, read-only).
const std::vector<BabiSample>& load_babi_file(const std::string& path);

}  // namespace mnemo
