// Fuzz target: the evaluation tasks' data files — the zero-shot tasks' importers (tasks/harness: lm-eval JSONL,
// PIQA with its labels file, ARC / OpenBookQA / BoolQ / SIQA / HellaSwag in the shipped forms, WikiText pages
// and detokeniser) and bAbI (BABILong's facts). Input: byte 0 picks the format; for PIQA a NUL byte splits the
// questions file from the labels file. Seeds: the first lines of each file in ../shared/data (scripts/fuzz).
#include <cstring>

#include "fuzz_common.h"
#include "tasks/babi.h"
#include "tasks/harness/task_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kFormats[] = {"jsonl", "piqa", "arc_llmfoundry", "openbookqa_llmfoundry",
                                         "boolq_llmfoundry", "siqa_commonbench", "hellaswag_original",
                                         "hellaswag_text"};
  constexpr size_t kImporters = sizeof kFormats / sizeof kFormats[0];
  if (size == 0) return 0;
  const size_t pick = data[0] % (kImporters + 2);
  const std::string text = mnemo_fuzz::as_string(data + 1, size - 1);
  return mnemo_fuzz::guarded([&] {
    if (pick == kImporters) {
      for (const auto& s : parse_babi(text, "qa1_fuzz_test.txt")) (void)s.answer.size();
      return;
    }
    if (pick == kImporters + 1) {
      for (const auto& page : harness::wikitext_pages(text)) (void)harness::wikitext_detokenize(page);
      (void)harness::hellaswag_preprocess(text);
      return;
    }
    harness::LoadedFile file, labels;
    file.file = "fuzz/data.jsonl";
    labels.file = "fuzz/labels.lst";
    const size_t nul = text.find('\0');
    file.text = text.substr(0, nul);
    labels.text = nul == std::string::npos ? std::string() : text.substr(nul + 1);
    const std::string format = kFormats[pick];
    // --skip-malformed's path first (a malformed record becomes a placeholder), then the default (the first one is
    // the Error).
    (void)harness::malformed_records_of(
        harness::import_documents(format, file, format == "piqa" ? &labels : nullptr, "fuzz", /*skip_malformed=*/true));
    (void)harness::import_documents(format, file, format == "piqa" ? &labels : nullptr, "fuzz");
  });
}
