// Tokenizers from a Hugging Face `tokenizer.json` (the only tokenizer file most current checkpoints ship).
//
// Reads the BPE model in the two layouts published checkpoints use:
//   - byte-level BPE (GPT-2, Llama-3, Qwen2): ByteLevel pre-tokenizer (GPT-2 regex) or Split(Unicode regex) +
//     ByteLevel(use_regex=false), the GPT-2 byte<->unicode table, ByteLevel decoder;
//   - SentencePiece-style BPE (Llama-2, Mistral): normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] or the
//     Metaspace pre-tokenizer, byte_fallback with <0xNN> tokens, decoders Replace/ByteFallback/Fuse/Strip.
// Components: normalizers NFC, NFKC, Prepend, Replace (string pattern), Sequence; pre-tokenizers ByteLevel,
// Split (regex or string pattern; Isolated or Removed), Metaspace, Sequence; decoders ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence; post-processors ByteLevel, TemplateProcessing, Sequence (they
// only decide BOS). Any other component is refused by name. Regexes run on PCRE2 (UTF + UCP, JIT).
//
// encode() follows the library's encode(text, add_special_tokens=False): added tokens (special or not) are
// matched in the text first (leftmost-longest, lstrip/rstrip honoured), the rest is normalized, pre-tokenized
// and merged by BPE rank. Text that is not valid UTF-8 is read with each invalid sequence as U+FFFD.
// decode() follows decode(ids, skip_special_tokens=True). Checked against the library on
// tests/data/tokenizers (scripts/make_tokenizer_fixtures.py).
#pragma once
#include <memory>
#include <string>

#include "tasks/tokenizer.h"

namespace mnemo {

class HfTokenizer : public Tokenizer {
 public:
  // `path`: a tokenizer.json file, or a folder holding one. Every unreadable or unsupported part is an Error
  // naming the file and the field.
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  // BOS: the special token TemplateProcessing puts before a single sequence (none without one). EOS: the
  // folder's tokenizer_config.json "eos_token" if there is one, else the first of </s>, <|end_of_text|>,
  // <|endoftext|> among the added tokens. PAD: tokenizer_config.json "pad_token", else <pad>, else EOS.
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  int64_t pad_id() const override;
  // "hf:<folder>/tokenizer.json:<sha256 of the file, 12 hex>" ("hf:<file name>:..." for another file name).
  std::string id() const override;
  const std::string& path() const;
  // The token as stored in the file (byte-level tokens in the GPT-2 alphabet, "▁the", "<0x0A>"); "" outside
  // the vocabulary. -1 for a string that is no token.
  std::string id_to_token(int64_t id) const;
  int64_t token_to_id(const std::string& token) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when `path` names a tokenizer.json-style file (ends in .json) or a folder holding a tokenizer.json.
bool is_hf_tokenizer_path(const std::string& path);

}  // namespace mnemo
