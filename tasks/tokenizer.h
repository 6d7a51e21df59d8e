// Tokenizers for text tasks: a byte-level tokenizer (no training) and SentencePiece
// (load a .model; `mnemo tokenizer train` trains one with SentencePiece's own trainer).
// Length budgets of text tasks are counted in the configured tokenizer's tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain text -> ids, no special tokens.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // ids -> text. Special ids (BOS/EOS/PAD/UNK controls) and ids outside the vocabulary decode to
  // nothing (a model's vocabulary may be padded past the tokenizer's). Always valid UTF-8.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // -1 if none
  virtual int64_t eos_id() const = 0;  // -1 if none
  // Right-padding id: the tokenizer's PAD, else EOS, else 0 (padded positions are never labelled).
  virtual int64_t pad_id() const;
  // Identifier recorded with every result: "byte", "sp:<file name>:<sha256 of the file, 12 hex>", or
  // "hf:<folder>/tokenizer.json:<sha256, 12 hex>".
  virtual std::string id() const = 0;

  // encode() with BOS prepended when the tokenizer defines one (docs/tasks.md#evaluation-machinery BOS policy).
  std::vector<int64_t> encode_with_bos(const std::string& text) const;
  bool adds_bos() const { return bos_id() >= 0; }
};

// Bytes 0..255 are the tokens. "byte": BOS = 256, EOS = 257, vocab 258. "byte:plain": vocab 256,
// no specials.
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(bool with_specials = true) : specials_(with_specials) {}
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return specials_ ? 258 : 256; }
  int64_t bos_id() const override { return specials_ ? 256 : -1; }
  int64_t eos_id() const override { return specials_ ? 257 : -1; }
  std::string id() const override { return specials_ ? "byte" : "byte:plain"; }

 private:
  bool specials_;
};

// A SentencePiece model file (BPE or unigram), via libsentencepiece.
class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);  // Error if missing/corrupt
  ~SentencePieceTokenizer() override;
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  int64_t pad_id() const override;
  std::string id() const override { return id_; }
  const std::string& path() const { return path_; }
  // The piece table (read from the model file's ModelProto; Error for an id outside [0, vocab_size)).
  // id_to_piece gives the piece as stored ("\xE2\x96\x81the" for " the", "<0x0A>" for a byte piece).
  std::string id_to_piece(int64_t id) const;
  bool is_control(int64_t id) const;     // BOS/EOS/PAD and other control pieces
  bool is_unknown(int64_t id) const;     // the <unk> piece
  bool is_byte_piece(int64_t id) const;  // byte-fallback piece <0xNN>

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_, id_;
};

// spec: "byte", "byte:plain", the path of a SentencePiece .model, or of a Hugging Face tokenizer.json (a
// file ending in .json, or a folder holding a tokenizer.json; tasks/hf_tokenizer.h) — absolute, relative to
// the working directory, or relative to the data directory. Anything else is an Error.
std::shared_ptr<Tokenizer> load_tokenizer(const std::string& spec);

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence per line
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  std::string out_prefix;          // writes <prefix>.model and <prefix>.vocab
  double character_coverage = 1.0;
  int64_t input_sentence_size = 0;  // 0 = all lines; else a random sample of this many
  int64_t max_sentence_length = 16384;  // bytes; longer lines are skipped by the trainer
  bool byte_fallback = false;
};

// Trains with sentencepiece::SentencePieceTrainer (ids: unk 0, bos 1, eos 2, no pad) and returns
// the path of the written .model. Bad options, missing inputs and trainer failures are Errors.
std::string train_sentencepiece(const SentencePieceTrainOptions& options);

// Replaces invalid UTF-8 sequences by U+FFFD (byte-level decoding, JSON output).
std::string sanitize_utf8(const std::string& bytes);
// Drops an incomplete multi-byte sequence at the end (after truncating bytes).
std::string trim_incomplete_utf8(const std::string& bytes);

}  // namespace mnemo
