// load_tokenizer (tasks/tokenizer.h): a tokenizer spec to a shared tokenizer of the right kind (byte, SentencePiece,
// Hugging Face tokenizer.json), apart from the tokenizers themselves so that none of them includes another's file.
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "tasks/hf_tokenizer.h"
#include "tasks/tokenizer.h"

namespace mnemo {
namespace fs = std::filesystem;

std::shared_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_shared<ByteTokenizer>(true);
  if (spec == "byte:plain") return std::make_shared<ByteTokenizer>(false);
  if (spec.empty())
    throw Error("tokenizer: empty spec (expected \"byte\", \"byte:plain\", a .model path or a tokenizer.json)");
  std::string path = spec;
  if (!fs::exists(path)) {
    const fs::path in_data = fs::path(data_dir()) / spec;
    if (fs::exists(in_data)) path = in_data.string();
  }
  if (!fs::exists(path))
    throw Error("tokenizer '" + spec +
                "': no such file (expected \"byte\", \"byte:plain\", a SentencePiece .model path, or a "
                "tokenizer.json file or a folder holding one)");
  // Loaded models are shared: tasks and evaluators ask for the same tokenizer repeatedly.
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<Tokenizer>> cache;
  const std::string key = fs::weakly_canonical(path).string() + "@" +
                          std::to_string(fs::last_write_time(path).time_since_epoch().count());
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::shared_ptr<Tokenizer> tok;
  if (is_hf_tokenizer_path(path)) tok = std::make_shared<HfTokenizer>(path);
  else tok = std::make_shared<SentencePieceTokenizer>(path);
  cache.emplace(key, tok);
  return tok;
}

}  // namespace mnemo
