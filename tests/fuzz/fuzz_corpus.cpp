// Fuzz target: language-model corpora and token shards (tasks/corpus, tasks/token_shard): a JSONL corpus, a
// .txt corpus split at blank lines or per line, and a cached token shard read back (header, size, checksum,
// document starts). Input: byte 0 picks which; the rest is the file. Seeds: tinyshakespeare and a shard
// written by mnemo (scripts/fuzz).
#include "fuzz_common.h"
#include "tasks/corpus.h"
#include "tasks/token_shard.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int pick = data[0] % 4;
  return mnemo_fuzz::guarded([&] {
    if (pick == 3) {
      auto shard = TokenShard::open(mnemo_fuzz::write_scratch("shard.bin", data + 1, size - 1));
      const auto& starts = shard->document_starts();
      if (shard->size() > 0) (void)shard->token(shard->size() - 1);
      (void)starts.size();
      return;
    }
    CorpusSpec spec;
    spec.inputs = {mnemo_fuzz::write_scratch(pick == 0 ? "corpus.jsonl" : "corpus.txt", data + 1, size - 1)};
    spec.doc_split = pick == 2 ? "line" : "blank_line";
    spec.val_every = 3;
    for (CorpusSplit split : {CorpusSplit::train, CorpusSplit::validation})
      (void)for_each_document(spec, split, [](int64_t, const std::string& name, const std::string& text) {
        (void)name.size();
        (void)text.size();
      });
  });
}
