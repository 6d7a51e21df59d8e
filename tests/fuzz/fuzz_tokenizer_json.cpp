// Fuzz target: Hugging Face tokenizer.json files (tasks/hf_tokenizer): the reader (model, merges, normalizers,
// pre-tokenizer regexes, decoders, added tokens), then encoding and decoding with what it read.
// Input: a tokenizer.json file, then optionally a NUL and a text to encode. Seeds: the fixtures in
// tests/data/tokenizers, each with a sample text (scripts/fuzz).
#include <cstring>

#include "fuzz_common.h"
#include "tasks/hf_tokenizer.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t file_size = nul ? static_cast<size_t>(nul - data) : size;
  const std::string text = nul ? mnemo_fuzz::as_string(nul + 1, size - file_size - 1) : "Hello world, 123 <s>!";
  return mnemo_fuzz::guarded([&] {
    HfTokenizer tok(mnemo_fuzz::write_scratch("tokenizer.json", data, file_size));
    const auto ids = tok.encode(text);
    (void)tok.decode(ids);
    // Any id list decodes (ids past the vocabulary to nothing) into valid UTF-8.
    std::vector<int64_t> some;
    for (size_t i = 0; i < text.size() && i < 64; ++i) some.push_back(static_cast<unsigned char>(text[i]) * 7 - 3);
    (void)tok.decode(some);
  });
}
