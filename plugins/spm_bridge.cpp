// Bridge to libsentencepiece with a plain C interface. SentencePiece ships its own copy of
// protobuf, which clashes with the libprotobuf LibTorch loads: linked into one binary, the two
// crash before main(). tasks/tokenizer.cpp therefore opens this library at run time with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so SentencePiece binds to its own protobuf. Only plain C
// types cross the boundary. Built as the shared library mnemo_spm (CMakeLists.txt).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
struct Handle {
  sentencepiece::SentencePieceProcessor sp;
  std::vector<int> ids;  // last encode result
  std::string text;      // last decode result
};

int fail(const std::string& message, char* err, size_t errlen) {
  if (err && errlen > 0) {
    std::strncpy(err, message.c_str(), errlen - 1);
    err[errlen - 1] = '\0';
  }
  return 0;
}
}  // namespace

extern "C" {

int mnemo_spm_abi_version() { return 1; }

void* mnemo_spm_load(const char* proto, size_t size, char* err, size_t errlen) {
  auto* h = new Handle();
  const auto status = h->sp.LoadFromSerializedProto(std::string(proto, size));
  if (!status.ok()) {
    fail(status.ToString(), err, errlen);
    delete h;
    return nullptr;
  }
  return h;
}

void mnemo_spm_free(void* handle) { delete static_cast<Handle*>(handle); }

void mnemo_spm_info(void* handle, int* piece_size, int* bos, int* eos, int* pad, int* unk) {
  auto& sp = static_cast<Handle*>(handle)->sp;
  *piece_size = sp.GetPieceSize();
  *bos = sp.bos_id();
  *eos = sp.eos_id();
  *pad = sp.pad_id();
  *unk = sp.unk_id();
}

int mnemo_spm_is_control(void* handle, int id) { return static_cast<Handle*>(handle)->sp.IsControl(id) ? 1 : 0; }

// The ids stay valid until the next call on the same handle.
int mnemo_spm_encode(void* handle, const char* text, size_t len, const int** ids, size_t* n, char* err,
                     size_t errlen) {
  auto* h = static_cast<Handle*>(handle);
  h->ids.clear();
  const auto status = h->sp.Encode(std::string(text, len), &h->ids);
  if (!status.ok()) return fail(status.ToString(), err, errlen);
  *ids = h->ids.data();
  *n = h->ids.size();
  return 1;
}

// The text stays valid until the next call on the same handle.
int mnemo_spm_decode(void* handle, const int* ids, size_t n, const char** text, size_t* len, char* err,
                     size_t errlen) {
  auto* h = static_cast<Handle*>(handle);
  h->text.clear();
  const auto status = h->sp.Decode(std::vector<int>(ids, ids + n), &h->text);
  if (!status.ok()) return fail(status.ToString(), err, errlen);
  *text = h->text.data();
  *len = h->text.size();
  return 1;
}

// SentencePieceTrainer::Train with key/value arguments (the spm_train flags without "--").
int mnemo_spm_train(const char* const* keys, const char* const* values, size_t n, char* err, size_t errlen) {
  std::unordered_map<std::string, std::string> kwargs;
  for (size_t i = 0; i < n; ++i) kwargs[keys[i]] = values[i];
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs);
  if (!status.ok()) return fail(status.ToString(), err, errlen);
  return 1;
}

}  // extern "C"
