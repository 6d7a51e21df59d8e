// Token shards: a corpus split tokenised once into a flat binary file and memory-mapped for training and
// validation (docs/tasks.md#language-modelling; nanoGPT's train.bin idea), plus corpus-trained SentencePiece models.
//
// File format (little-endian):
//   bytes 0..7    magic "MNEMOTK1"
//   bytes 8..15   uint64 H, the header length
//   H bytes       JSON header (may end in spaces), then zero padding to an 8-byte boundary
//   n_tokens      tokens, uint16 (vocab_size <= 65536) or uint32
// Header: {"format": 1, "tokenizer": Tokenizer::id(), "vocab_size", "bos_id", "eos_id", "dtype": "uint16"|"uint32",
//   "split": "train"|"validation"|"all", "corpus": CorpusSpec::to_json(), "files": [{"path", "bytes", "sha256"}],
//   "n_tokens", "n_documents", "n_text_bytes" (UTF-8 bytes of the document texts), "token_checksum" (FNV-1a 64
//   over the token bytes, 16 hex digits), "created_at"}.
// Token stream (docs/tasks.md#language-modelling): every document as [BOS] + encode(text) + [EOS] (BOS / EOS only when the tokenizer has
// them), concatenated in corpus order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/common.h"
#include "tasks/corpus.h"
#include "tasks/tokenizer.h"

namespace mnemo {

// A read-only, memory-mapped shard (munmap in the destructor; movable, not copyable).
class TokenShard {
 public:
  // Error naming the path: missing, bad magic, truncated, size != header, malformed header, checksum mismatch
  // ("corrupted").
  static std::unique_ptr<TokenShard> open(const std::string& path, bool verify_checksum = true);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t size() const { return n_tokens_; }  // tokens
  int64_t token(int64_t i) const;              // bounds-checked
  void read(int64_t start, int64_t n, int64_t* out) const;  // tokens [start, start + n), bounds-checked
  const json& header() const { return header_; }
  const std::string& path() const { return path_; }
  // Start offset of every document: the positions of BOS, or 0 and every EOS + 1 (< size) when there is no
  // BOS; {0} when the tokenizer has neither. Built on the first call by scanning the tokens.
  const std::vector<int64_t>& document_starts() const;

 private:
  TokenShard() = default;
  void release();
  std::string path_;
  json header_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const unsigned char* tokens_ = nullptr;  // into the mapping
  int width_ = 2;                          // bytes per token
  int64_t n_tokens_ = 0;
  mutable std::unique_ptr<std::mutex> starts_mutex_ = std::make_unique<std::mutex>();
  mutable std::vector<int64_t> starts_;
  mutable bool starts_built_ = false;
};

// The shard for `split` of `corpus` under `tok` in `cache_dir` (created if missing): <cache_dir>/shards/
// <split>-<key16>.bin, key = sha256 of (tokenizer id, CorpusSpec::to_json(), split, every file's path + sha256);
// the files are hashed on every call. Reused when that file opens (checksum verified) and its header's
// tokenizer, corpus, split and files (path + sha256) equal the current ones; otherwise rebuilt, with a log line
// saying why. Building logs a progress line about every 2 s (documents, MB, tokens, MB/s, ETA) and writes
// <name>.tmp.<pid>, fsync, rename: no half-written shard on an error or a stop signal (stop_requested() is
// polled). Errors: an id outside [0, vocab_size) or a vocabulary over 2^32, a split without documents.
std::string ensure_token_shard(const CorpusSpec& corpus, CorpusSplit split, const Tokenizer& tok,
                               const std::string& cache_dir, const std::function<void(const std::string&)>& log);

// Bytes of text each token id stands for (bits-per-byte): byte tokenizer -> 1 for 0..255, 0 for BOS/EOS;
// SentencePiece -> UTF-8 bytes of the piece with U+2581 counted as one byte (a space), byte-fallback pieces
// <0xNN> 1, control and unknown pieces 0. Other tokenizers: Error.
std::vector<int32_t> token_byte_lengths(const Tokenizer& tok);

// "sp-bpe:N" or "sp-unigram:N" (N = vocabulary size): a SentencePiece model trained on the corpus.
bool is_corpus_tokenizer_spec(const std::string& spec);
// Trains (or reuses) that model on the corpus's TRAINING documents: one paragraph per line (lines cut to at most
// 4096 bytes), at most `max_sentences` lines taken evenly spaced over the corpus (deterministic), SentencePiece
// with byte_fallback (every byte encodable) and character_coverage 0.9995. Cached as
// <cache_dir>/tokenizers/<key16>.model, key = sha256 of (spec, corpus json, files' sha256); returns its path.
std::string ensure_corpus_tokenizer(const CorpusSpec& corpus, const std::string& spec, const std::string& cache_dir,
                                    const std::function<void(const std::string&)>& log, int64_t max_sentences = 300000);

}  // namespace mnemo
