#include "tasks/tokenizer.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/file_tree.h"

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

// ---- SentencePiece, through the bridge library (plugins/spm_bridge.cpp) ----
//
// libsentencepiece carries its own protobuf, which crashes a process that also loads LibTorch's
// libprotobuf; the bridge is opened with RTLD_LOCAL | RTLD_DEEPBIND so SentencePiece binds to its
// own copy. Search order: $MNEMO_SPM_BRIDGE, the build's path (MNEMO_SPM_BRIDGE_PATH), then
// libmnemo_spm.so next to the running executable.

namespace {

constexpr size_t kErrLen = 1024;

struct SpmBridge {
  int (*abi_version)();
  void* (*load)(const char*, size_t, char*, size_t);
  void (*free_handle)(void*);
  void (*info)(void*, int*, int*, int*, int*, int*);
  int (*is_control)(void*, int);
  int (*encode)(void*, const char*, size_t, const int**, size_t*, char*, size_t);
  int (*decode)(void*, const int*, size_t, const char**, size_t*, char*, size_t);
  int (*train)(const char* const*, const char* const*, size_t, char*, size_t);
};

const SpmBridge& spm_bridge() {
  static std::mutex mutex;
  static std::unique_ptr<SpmBridge> bridge;
  std::lock_guard<std::mutex> lock(mutex);
  if (bridge) return *bridge;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MNEMO_SPM_BRIDGE")) candidates.push_back(env);
#ifdef MNEMO_SPM_BRIDGE_PATH
  candidates.push_back(MNEMO_SPM_BRIDGE_PATH);
#endif
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path() / "libmnemo_spm.so").string());
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifdef RTLD_DEEPBIND
  flags |= RTLD_DEEPBIND;
#endif
  void* lib = nullptr;
  std::string tried;
  for (const auto& c : candidates) {
    lib = dlopen(c.c_str(), flags);
    if (lib) break;
    const char* why = dlerror();
    tried += "\n  " + c + ": " + (why ? why : "not loadable");
  }
  if (!lib) throw Error("SentencePiece support library libmnemo_spm.so could not be loaded (set MNEMO_SPM_BRIDGE):" + tried);
  auto b = std::make_unique<SpmBridge>();
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (!p) throw Error(std::string("libmnemo_spm.so lacks the symbol ") + name);
    return p;
  };
  b->abi_version = reinterpret_cast<int (*)()>(sym("mnemo_spm_abi_version"));
  b->load = reinterpret_cast<void* (*)(const char*, size_t, char*, size_t)>(sym("mnemo_spm_load"));
  b->free_handle = reinterpret_cast<void (*)(void*)>(sym("mnemo_spm_free"));
  b->info = reinterpret_cast<void (*)(void*, int*, int*, int*, int*, int*)>(sym("mnemo_spm_info"));
  b->is_control = reinterpret_cast<int (*)(void*, int)>(sym("mnemo_spm_is_control"));
  b->encode = reinterpret_cast<int (*)(void*, const char*, size_t, const int**, size_t*, char*, size_t)>(
      sym("mnemo_spm_encode"));
  b->decode = reinterpret_cast<int (*)(void*, const int*, size_t, const char**, size_t*, char*, size_t)>(
      sym("mnemo_spm_decode"));
  b->train = reinterpret_cast<int (*)(const char* const*, const char* const*, size_t, char*, size_t)>(
      sym("mnemo_spm_train"));
  if (b->abi_version() != 1) throw Error("libmnemo_spm.so has an unexpected interface version");
  bridge = std::move(b);
  return *bridge;
}

}  // namespace

namespace {

// The piece table of a serialized sentencepiece ModelProto (sentencepiece_model.proto: ModelProto field 1 =
// repeated SentencePiece { 1: string piece, 2: float score, 3: Type type = NORMAL }; Type NORMAL 1, UNKNOWN 2,
// CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6). Read here, from the same bytes the bridge loads, so the bridge's
// C interface stays as it is. Returns "" on success, else what is wrong.
struct ProtoReader {
  const unsigned char* p;
  const unsigned char* end;
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const unsigned char b = *p++;
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // Skips a field of `wire` type; false if malformed.
  bool skip(uint64_t wire) {
    uint64_t n = 0;
    switch (wire) {
      case 0: return varint(n);
      case 1: n = 8; break;
      case 2: if (!varint(n)) return false; break;
      case 5: n = 4; break;
      default: return false;
    }
    if (n > uint64_t(end - p)) return false;
    p += n;
    return true;
  }
};

std::string read_piece_table(const std::string& model, std::vector<std::string>& pieces, std::vector<uint8_t>& types) {
  ProtoReader r{reinterpret_cast<const unsigned char*>(model.data()),
                reinterpret_cast<const unsigned char*>(model.data()) + model.size()};
  while (r.p < r.end) {
    uint64_t tag = 0, len = 0;
    if (!r.varint(tag)) return "malformed field tag";
    if (tag >> 3 != 1 || (tag & 7) != 2) {
      if (!r.skip(tag & 7)) return "malformed field " + std::to_string(tag >> 3);
      continue;
    }
    if (!r.varint(len) || len > uint64_t(r.end - r.p)) return "malformed piece entry";
    ProtoReader m{r.p, r.p + len};
    r.p += len;
    std::string piece;
    uint64_t type = 1;  // NORMAL
    while (m.p < m.end) {
      uint64_t t = 0, v = 0;
      if (!m.varint(t)) return "malformed piece entry";
      if (t == ((1 << 3) | 2)) {
        if (!m.varint(v) || v > uint64_t(m.end - m.p)) return "malformed piece string";
        piece.assign(reinterpret_cast<const char*>(m.p), v);
        m.p += v;
      } else if (t == ((3 << 3) | 0)) {
        if (!m.varint(type)) return "malformed piece type";
      } else if (!m.skip(t & 7)) {
        return "malformed piece field " + std::to_string(t >> 3);
      }
    }
    pieces.push_back(std::move(piece));
    types.push_back(static_cast<uint8_t>(type));
  }
  return "";
}

constexpr uint8_t kPieceUnknown = 2, kPieceControl = 3, kPieceByte = 6;

}  // namespace

struct SentencePieceTokenizer::Impl {
  void* handle = nullptr;
  int piece_size = 0, bos = -1, eos = -1, pad = -1, unk = -1;
  std::vector<bool> control;  // per id
  std::vector<std::string> pieces;  // per id, from the ModelProto
  std::vector<uint8_t> types;       // per id, SentencePiece::Type
  std::string piece_error;          // why the piece table is unavailable ("" = fine)
  std::mutex mutex;           // the bridge's result buffers are per handle
  ~Impl() {
    if (handle) spm_bridge().free_handle(handle);
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : impl_(std::make_unique<Impl>()), path_(model_path) {
  if (!fs::is_regular_file(model_path))
    throw Error("tokenizer: SentencePiece model '" + model_path + "' does not exist");
  const std::string bytes = read_text_file(model_path);
  const SpmBridge& b = spm_bridge();
  char err[kErrLen] = {0};
  impl_->handle = b.load(bytes.data(), bytes.size(), err, kErrLen);
  if (!impl_->handle) throw Error("tokenizer: cannot load SentencePiece model '" + model_path + "': " + err);
  b.info(impl_->handle, &impl_->piece_size, &impl_->bos, &impl_->eos, &impl_->pad, &impl_->unk);
  if (impl_->piece_size <= 0)
    throw Error("tokenizer: SentencePiece model '" + model_path + "' has an empty vocabulary");
  impl_->control.resize(impl_->piece_size);
  for (int i = 0; i < impl_->piece_size; ++i) impl_->control[i] = b.is_control(impl_->handle, i) != 0;
  // The piece table is needed only by its accessors: a problem here is reported when one is called.
  impl_->piece_error = read_piece_table(bytes, impl_->pieces, impl_->types);
  if (impl_->piece_error.empty() && static_cast<int64_t>(impl_->pieces.size()) != impl_->piece_size)
    impl_->piece_error = std::to_string(impl_->pieces.size()) + " pieces read, the model has " +
                         std::to_string(impl_->piece_size);
  for (int i = 0; impl_->piece_error.empty() && i < impl_->piece_size; ++i)
    if ((impl_->types[i] == kPieceControl) != impl_->control[i])
      impl_->piece_error = "piece " + std::to_string(i) + " has an unexpected type";
  id_ = "sp:" + fs::path(model_path).filename().string() + ":" + sha256_hex(bytes).substr(0, 12);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const int* ids = nullptr;
  size_t n = 0;
  char err[kErrLen] = {0};
  if (!spm_bridge().encode(impl_->handle, text.data(), text.size(), &ids, &n, err, kErrLen))
    throw Error("tokenizer " + id_ + ": encode failed: " + err);
  return std::vector<int64_t>(ids, ids + n);
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids)
    if (id >= 0 && id < impl_->piece_size && !impl_->control[id]) kept.push_back(static_cast<int>(id));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const char* text = nullptr;
  size_t len = 0;
  char err[kErrLen] = {0};
  if (!spm_bridge().decode(impl_->handle, kept.data(), kept.size(), &text, &len, err, kErrLen))
    throw Error("tokenizer " + id_ + ": decode failed: " + err);
  return sanitize_utf8(std::string(text, len));
}

namespace {
// Type of piece `id` after checking the table and the id (Error naming the model and id).
uint8_t piece_type(const SentencePieceTokenizer& tok, const std::string& error, int64_t piece_size,
                   const std::vector<uint8_t>& types, int64_t id) {
  if (!error.empty()) throw Error("tokenizer " + tok.id() + ": cannot read the piece table of " + tok.path() + ": " + error);
  if (id < 0 || id >= piece_size)
    throw Error("tokenizer " + tok.id() + ": piece id " + std::to_string(id) + " is outside [0, " +
                std::to_string(piece_size) + ")");
  return types[static_cast<size_t>(id)];
}
}  // namespace

std::string SentencePieceTokenizer::id_to_piece(int64_t id) const {
  piece_type(*this, impl_->piece_error, impl_->piece_size, impl_->types, id);
  return impl_->pieces[static_cast<size_t>(id)];
}
bool SentencePieceTokenizer::is_control(int64_t id) const {
  return piece_type(*this, impl_->piece_error, impl_->piece_size, impl_->types, id) == kPieceControl;
}
bool SentencePieceTokenizer::is_unknown(int64_t id) const {
  return piece_type(*this, impl_->piece_error, impl_->piece_size, impl_->types, id) == kPieceUnknown;
}
bool SentencePieceTokenizer::is_byte_piece(int64_t id) const {
  return piece_type(*this, impl_->piece_error, impl_->piece_size, impl_->types, id) == kPieceByte;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->piece_size; }
int64_t SentencePieceTokenizer::bos_id() const { return impl_->bos; }
int64_t SentencePieceTokenizer::eos_id() const { return impl_->eos; }
int64_t SentencePieceTokenizer::pad_id() const { return impl_->pad >= 0 ? impl_->pad : Tokenizer::pad_id(); }

namespace {

using SpmArgs = std::unordered_map<std::string, std::string>;

// What one run of SentencePiece's trainer came to.
struct SpmOutcome {
  bool ok = false;
  int signal = 0;     // the trainer crashed with this signal
  std::string error;  // SentencePiece's own error message
};

// SentencePiece's trainer runs in a forked child: it segfaults (BPE, when the text has fewer merge candidates
// than the vocabulary asks for) or aborts on some inputs, and a crash inside the library must not take mnemo
// down. The child writes SentencePiece's error message, if any, into a pipe.
SpmOutcome train_in_child(const SpmArgs& kw) {
  const SpmBridge& bridge = spm_bridge();  // opened here, in the parent
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : kw) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  int fds[2];
  if (pipe(fds) != 0) throw Error(std::string("tokenizer train: pipe() failed: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("tokenizer train: fork() failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // a crash here is expected on some inputs: no core file
    char err[kErrLen] = {0};
    const bool ok = bridge.train(keys.data(), values.data(), keys.size(), err, kErrLen) != 0;
    if (!ok) {
      const ssize_t w = write(fds[1], err, strnlen(err, kErrLen));
      (void)w;
    }
    close(fds[1]);
    _exit(ok ? 0 : 3);
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  while (true) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) message.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(std::string("tokenizer train: waitpid() failed: ") + std::strerror(errno));
  SpmOutcome out;
  if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
    return out;
  }
  out.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!out.ok) out.error = message.empty() ? "the trainer exited with status " + std::to_string(WEXITSTATUS(status))
                                           : message;
  return out;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    default: return "signal " + std::to_string(sig);
  }
}

// What the training text can yield. Every piece of a whitespace-split SentencePiece model is a substring of
// one "▁word", so for ASCII text (which NFKC normalisation does not lengthen) the vocabulary is at most
// 3 special pieces + the distinct characters and ▁ + Σ over distinct words of the substrings of ▁word that
// are 2 or more symbols long (L·(L+1)/2 for a word of L characters) (+ 256 byte pieces with byte fallback).
struct TextStats {
  uint64_t bytes = 0;
  bool ascii = true;
  int64_t distinct_chars = 0, distinct_words = 0;
  int64_t max_pieces = 0;  // the bound above; meaningful when ascii
};

TextStats text_stats(const std::vector<std::string>& files, bool byte_fallback) {
  TextStats st;
  std::unordered_set<std::string> words;
  std::set<std::string> chars;  // UTF-8 sequences
  for (const auto& f : files) {
    const std::string text = read_text_file(f);
    st.bytes += text.size();
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) {
        const auto c = static_cast<unsigned char>(text[j]);
        const size_t n = std::max<size_t>(1, utf8_sequence_length(text, j));
        if (c >= 0x80) st.ascii = false;
        chars.insert(text.substr(j, n));
        j += n;
      }
      if (j > i) words.insert(text.substr(i, j - i));
      i = j;
    }
  }
  st.distinct_chars = static_cast<int64_t>(chars.size());
  st.distinct_words = static_cast<int64_t>(words.size());
  int64_t merged = 0;
  for (const auto& w : words) {
    const int64_t L = static_cast<int64_t>(w.size());
    merged += L * (L + 1) / 2;
  }
  st.max_pieces = 3 + (byte_fallback ? 256 : 0) + st.distinct_chars + 1 + merged;
  return st;
}

// The largest vocabulary in [lo, hi) that SentencePiece trains on this text without crashing or failing
// (found by bisection, each try in a child process writing into a scratch folder); 0 if even lo fails.
int64_t largest_trainable_vocab(SpmArgs kw, int64_t lo, int64_t hi) {
  const fs::path scratch = fs::temp_directory_path() / ("mnemo-spm-probe-" + std::to_string(getpid()));
  fs::create_directories(scratch);
  kw["model_prefix"] = (scratch / "probe").string();
  kw["minloglevel"] = "2";  // the tries' warnings are noise
  auto ok = [&](int64_t v) {
    kw["vocab_size"] = std::to_string(v);
    return train_in_child(kw).ok;
  };
  int64_t best = 0;
  if (lo < hi && ok(lo)) {
    best = lo;
    int64_t bad = hi;
    while (bad - best > 1) {
      const int64_t mid = best + (bad - best) / 2;
      (ok(mid) ? best : bad) = mid;
    }
  }
  std::error_code ec;
  remove_tree(scratch.string(), ec);  // not fs::remove_all: core/file_tree.h says why
  return best;
}

}  // namespace

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
  SpmArgs kw = {
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
  std::string files;  // for messages: "t.txt" or "a.txt, b.txt (3 files)"
  for (size_t i = 0; i < o.inputs.size() && i < 3; ++i) files += (i ? ", " : "") + o.inputs[i];
  if (o.inputs.size() > 3) files += ", ... (" + std::to_string(o.inputs.size()) + " files)";

  // A vocabulary the text cannot yield: say so with the maximum instead of letting SentencePiece crash.
  const TextStats st = text_stats(o.inputs, o.byte_fallback);
  constexpr uint64_t kProbeBytes = 1 << 20;  // small inputs: find the exact maximum by trying
  const int64_t lowest = std::min<int64_t>(o.vocab_size - 1, std::max<int64_t>(8, st.distinct_chars + 4));
  auto too_large = [&](const std::string& why) {
    std::string msg = "tokenizer train: --vocab-size " + std::to_string(o.vocab_size) + " is more than " + files +
                      " can yield (" + std::to_string(st.distinct_chars) + " distinct characters, " +
                      std::to_string(st.distinct_words) + " distinct words)";
    int64_t most = 0;
    if (st.bytes <= kProbeBytes) most = largest_trainable_vocab(kw, lowest, o.vocab_size);
    if (most > 0)
      msg += ": it supports at most " + std::to_string(most) + " " + o.model_type + " pieces";
    else if (st.ascii)
      msg += ": at most " + std::to_string(st.max_pieces) + " pieces";
    msg += why + "; use a smaller --vocab-size or more text";
    return Error(msg);
  };
  if (st.ascii && o.vocab_size > st.max_pieces) throw too_large("");

  const SpmOutcome r = train_in_child(kw);
  if (r.signal != 0)
    throw too_large(" (SentencePiece's " + o.model_type + " trainer crashed with " + signal_name(r.signal) + ")");
  if (!r.ok) throw Error("tokenizer train: SentencePiece trainer failed on " + files + ": " + r.error);
  const std::string model = o.out_prefix + ".model";
  if (!fs::is_regular_file(model)) throw Error("tokenizer train: trainer did not write '" + model + "'");
  return model;
}

}  // namespace mnemo
