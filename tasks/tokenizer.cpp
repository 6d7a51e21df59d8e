#include "tasks/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <mutex>
#include <unordered_map>

namespace mnemo {

namespace fs = std::filesystem;

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (RFC 3629: no overlongs, no surrogates,
// max U+10FFFF), or 0 if invalid/incomplete.
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string sanitize_utf8(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = utf8_sequence_length(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(bytes, i, n);
      i += n;
    }
  }
  return out;
}

std::string trim_incomplete_utf8(const std::string& bytes) {
  // Look back at most 3 bytes for the lead byte of a sequence that runs past the end.
  size_t end = bytes.size();
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    if (c >= 0xC0) {
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (need > back) end = bytes.size() - back;
    }
    break;
  }
  return bytes.substr(0, end);
}

int64_t Tokenizer::pad_id() const { return eos_id() >= 0 ? eos_id() : 0; }

std::vector<int64_t> Tokenizer::encode_with_bos(const std::string& text) const {
  std::vector<int64_t> ids;
  if (bos_id() >= 0) ids.push_back(bos_id());
  const auto body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

// ---- byte-level ----

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (int64_t id : ids)
    if (id >= 0 && id < 256) bytes.push_back(static_cast<char>(id));
  return sanitize_utf8(bytes);
}

// ---- SentencePiece ----

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : impl_(std::make_unique<Impl>()), path_(model_path) {
  if (!fs::is_regular_file(model_path))
    throw Error("tokenizer: SentencePiece model '" + model_path + "' does not exist");
  const std::string bytes = read_text_file(model_path);
  const auto status = impl_->sp.LoadFromSerializedProto(bytes);
  if (!status.ok())
    throw Error("tokenizer: cannot load SentencePiece model '" + model_path + "': " + status.ToString());
  if (impl_->sp.GetPieceSize() <= 0)
    throw Error("tokenizer: SentencePiece model '" + model_path + "' has an empty vocabulary");
  id_ = "sp:" + fs::path(model_path).filename().string() + ":" + sha256_hex(bytes).substr(0, 12);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw Error("tokenizer " + id_ + ": encode failed: " + status.ToString());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  const int64_t n = vocab_size();
  for (int64_t id : ids)
    if (id >= 0 && id < n && !impl_->sp.IsControl(static_cast<int>(id))) kept.push_back(static_cast<int>(id));
  std::string text;
  const auto status = impl_->sp.Decode(kept, &text);
  if (!status.ok()) throw Error("tokenizer " + id_ + ": decode failed: " + status.ToString());
  return sanitize_utf8(text);
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int64_t SentencePieceTokenizer::bos_id() const { return impl_->sp.bos_id(); }
int64_t SentencePieceTokenizer::eos_id() const { return impl_->sp.eos_id(); }
int64_t SentencePieceTokenizer::pad_id() const {
  return impl_->sp.pad_id() >= 0 ? impl_->sp.pad_id() : Tokenizer::pad_id();
}

std::shared_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_shared<ByteTokenizer>(true);
  if (spec == "byte:plain") return std::make_shared<ByteTokenizer>(false);
  if (spec.empty()) throw Error("tokenizer: empty spec (expected \"byte\", \"byte:plain\" or a .model path)");
  std::string path = spec;
  if (!fs::exists(path)) {
    const fs::path in_data = fs::path(data_dir()) / spec;
    if (fs::exists(in_data)) path = in_data.string();
  }
  if (!fs::exists(path))
    throw Error("tokenizer '" + spec +
                "': no such file (expected \"byte\", \"byte:plain\" or a SentencePiece .model path)");
  // Loaded models are shared: tasks and evaluators ask for the same tokenizer repeatedly.
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<Tokenizer>> cache;
  const std::string key = fs::weakly_canonical(path).string() + "@" +
                          std::to_string(fs::last_write_time(path).time_since_epoch().count());
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto tok = std::make_shared<SentencePieceTokenizer>(path);
  cache.emplace(key, tok);
  return tok;
}

std::string train_sentencepiece(const SentencePieceTrainOptions& o) {
  if (o.inputs.empty()) throw Error("tokenizer train: no --input files given");
  for (const auto& f : o.inputs)
    if (!fs::is_regular_file(f)) throw Error("tokenizer train: input file '" + f + "' does not exist");
  if (o.model_type != "bpe" && o.model_type != "unigram")
    throw Error("tokenizer train: --model-type must be bpe or unigram, got '" + o.model_type + "'");
  if (o.vocab_size < 8) throw Error("tokenizer train: --vocab-size must be >= 8, got " + std::to_string(o.vocab_size));
  if (o.out_prefix.empty()) throw Error("tokenizer train: --out PREFIX is required");
  if (o.character_coverage <= 0 || o.character_coverage > 1)
    throw Error("tokenizer train: --character-coverage must be in (0, 1], got " + std::to_string(o.character_coverage));
  const fs::path parent = fs::path(o.out_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent);

  std::string inputs;
  for (const auto& f : o.inputs) inputs += (inputs.empty() ? "" : ",") + f;
  std::unordered_map<std::string, std::string> kw = {
      {"input", inputs},
      {"model_prefix", o.out_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "1"},  // warnings and errors only
  };
  if (o.input_sentence_size > 0) {
    kw["input_sentence_size"] = std::to_string(o.input_sentence_size);
    kw["shuffle_input_sentence"] = "true";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(kw);
  if (!status.ok()) throw Error("tokenizer train: SentencePiece trainer failed: " + status.ToString());
  const std::string model = o.out_prefix + ".model";
  if (!fs::is_regular_file(model)) throw Error("tokenizer train: trainer did not write '" + model + "'");
  return model;
}

}  // namespace mnemo
