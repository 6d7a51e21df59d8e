#include "tasks/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/atomic_file.h"
#include "core/parse_int.h"
#include "core/process.h"
#include "core/progress.h"
#include "core/signals.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'M', 'N', 'E', 'M', 'O', 'T', 'K', '1'};
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL, kFnvPrime = 0x100000001b3ULL;
constexpr size_t kChunkBytes = 256 * 1024;  // non-byte tokenizers encode a document in paragraph chunks of this size

uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

uint64_t load_le(const unsigned char* p, int width) {
  uint64_t v = 0;
  for (int k = width - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

// JSON text that never throws on invalid UTF-8 (a file name can be any bytes).
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Buffered writer of the token stream (little-endian) with its running checksum.
class TokenWriter {
 public:
  TokenWriter(int fd, int width, const std::string& path) : fd_(fd), width_(width), path_(path) { buf_.reserve(kBuf); }
  void put(uint64_t id) {
    for (int k = 0; k < width_; ++k) buf_.push_back(static_cast<unsigned char>(id >> (8 * k)));
    if (buf_.size() >= kBuf) flush();
    ++n_;
  }
  void flush() {
    checksum_ = fnv1a(checksum_, buf_.data(), buf_.size());
    write_all(fd_, buf_.data(), buf_.size(), path_);
    buf_.clear();
  }
  int64_t count() const { return n_; }
  uint64_t checksum() const { return checksum_; }

  // Every write checked (core/atomic_file.h: EINTR retried, the OS error named, test fault injection).
  static void write_all(int fd, const void* data, size_t n, const std::string& path) { mnemo::write_all(fd, data, n, path); }

 private:
  static constexpr size_t kBuf = 1 << 20;
  int fd_, width_;
  std::string path_;
  std::vector<unsigned char> buf_;
  int64_t n_ = 0;
  uint64_t checksum_ = kFnvOffset;
};

// The next chunk end of `text` from `pos` for chunked encoding: after the last paragraph break ("\n\n") within
// kChunkBytes, else the last newline, else the last space, else a UTF-8 character boundary.
size_t chunk_end(const std::string& text, size_t pos) {
  if (text.size() - pos <= kChunkBytes) return text.size();
  const size_t limit = pos + kChunkBytes;
  for (const char* sep : {"\n\n", "\n", " "}) {
    const size_t p = text.rfind(sep, limit - std::strlen(sep));
    if (p != std::string::npos && p > pos) return p + std::strlen(sep);
  }
  size_t end = limit;
  while (end > pos + 1 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

// Removes <name>.tmp.<pid> files left by processes that are gone (killed while building).
void remove_stale_temporaries(const fs::path& target) {
  std::error_code ec;
  const std::string prefix = target.filename().string() + ".tmp.";
  for (fs::directory_iterator it(target.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto pid = parse_whole_int(name.substr(prefix.size()));
    std::error_code rec;
    if (pid && *pid > 0 && !process_alive(*pid)) fs::remove(it->path(), rec);
  }
}

// Why an existing shard cannot stand for the current one ("" = it can).
std::string mismatch(const json& h, const json& want) {
  for (const char* key : {"tokenizer", "split", "vocab_size", "bos_id", "eos_id", "corpus"})
    if (h.value(key, json()) != want.at(key))
      return std::string(key) + " differs (" + dump(h.value(key, json())) + " in the file, " + dump(want.at(key)) +
             " now)";
  const json files = h.value("files", json::array());
  const json& now = want.at("files");
  if (!files.is_array() || files.size() != now.size())
    return "the corpus has " + std::to_string(now.size()) + " files, the shard was built from " +
           std::to_string(files.is_array() ? files.size() : 0);
  for (size_t i = 0; i < now.size(); ++i)
    if (files[i].value("path", json()) != now[i].at("path") || files[i].value("sha256", json()) != now[i].at("sha256"))
      return "file " + now[i].at("path").get<std::string>() + " changed";
  return "";
}

// For the log line of a new shard: what changed since the newest shard of the same split, tokenizer and corpus
// spec in `dir` ("" if there is none).
std::string changed_since_previous(const fs::path& dir, const json& want) {
  const std::string prefix = want.at("split").get<std::string>() + "-";
  std::string why;
  fs::file_time_type newest{};
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    const std::string name = p.filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0 || p.extension() != ".bin") continue;
    try {
      const json h = TokenShard::open(p.string(), false)->header();
      if (h.value("tokenizer", json()) != want.at("tokenizer") || h.value("corpus", json()) != want.at("corpus")) continue;
      std::error_code tec;
      const auto t = fs::last_write_time(p, tec);
      if (tec || (!why.empty() && t <= newest)) continue;
      const std::string m = mismatch(h, want);
      if (m.empty()) continue;
      why = m + " since " + name;
      newest = t;
    } catch (const std::exception&) {  // unreadable shards say nothing about this one
    }
  }
  return why;
}

// Writes the shard to `tmp` (see the header comment for the format); the caller renames it.
void build_shard(const CorpusSpec& corpus, CorpusSplit split, const Tokenizer& tok, json header, const std::string& tmp,
                 const std::function<void(const std::string&)>& log) {
  const int width = header.at("dtype") == "uint16" ? 2 : 4;
  const int64_t vocab = tok.vocab_size(), bos = tok.bos_id(), eos = tok.eos_id();
  // Header space: the JSON with the widest values the counters can take; the real header is padded with spaces.
  json widest = header;
  for (const char* key : {"n_tokens", "n_documents", "n_text_bytes"}) widest[key] = std::numeric_limits<int64_t>::max();
  widest["token_checksum"] = hex16(0);
  const uint64_t H = dump(widest).size() + 16;
  const uint64_t data_offset = (16 + H + 7) / 8 * 8;

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(sys_error("cannot create", tmp));
  struct Closer {
    int fd;
    ~Closer() { if (fd >= 0) ::close(fd); }
  } closer{fd};
  std::string prefix(kMagic, 8);
  for (int k = 0; k < 8; ++k) prefix.push_back(static_cast<char>(H >> (8 * k)));
  prefix.append(data_offset - 16, '\0');  // header placeholder and padding
  TokenWriter::write_all(fd, prefix.data(), prefix.size(), tmp);

  TokenWriter out(fd, width, tmp);
  const auto* byte_tok = dynamic_cast<const ByteTokenizer*>(&tok);
  int64_t n_docs = 0, text_bytes = 0;
  const double t0 = wall_seconds();
  double last_log = t0, read_bytes = 0, total_bytes = 0;
  const std::string what = "token shard " + split_name(split);
  auto check_stop = [&] {
    if (stop_requested()) throw Error(what + ": interrupted by " + std::string(stop_signal_name()) + " (nothing written)");
  };
  auto progress = [&] {
    const double now = wall_seconds();
    if (now - last_log < 2.0 || !log) return;
    last_log = now;
    const double rate = read_bytes / std::max(1e-9, now - t0);
    log(what + ": " + std::to_string(n_docs) + " documents, " + mb(static_cast<double>(text_bytes)) + " of text, " +
        std::to_string(out.count()) + " tokens, " + mb(rate) + "/s, " + mb(read_bytes) + " of " + mb(total_bytes) +
        " read, ETA " + format_duration(rate > 0 ? (total_bytes - read_bytes) / rate : 0));
  };
  auto put = [&](int64_t id) {
    if (id < 0 || id >= vocab)
      throw Error("tokenizer " + tok.id() + " yields id " + std::to_string(id) + " outside [0, " + std::to_string(vocab) +
                  ")");
    out.put(static_cast<uint64_t>(id));
  };
  for_each_document(
      corpus, split,
      [&](int64_t, const std::string&, const std::string& text) {
        check_stop();
        if (bos >= 0) put(bos);
        if (byte_tok) {
          for (unsigned char c : text) out.put(c);
        } else {
          for (size_t pos = 0; pos < text.size();) {
            const size_t end = chunk_end(text, pos);
            for (int64_t id : tok.encode(text.substr(pos, end - pos))) put(id);
            pos = end;
            check_stop();
            progress();
          }
        }
        if (eos >= 0) put(eos);
        ++n_docs;
        text_bytes += static_cast<int64_t>(text.size());
      },
      [&](int64_t done, int64_t total) {
        read_bytes = static_cast<double>(done);
        total_bytes = static_cast<double>(total);
        progress();
      });
  out.flush();

  header["n_tokens"] = out.count();
  header["n_documents"] = n_docs;
  header["n_text_bytes"] = text_bytes;
  header["token_checksum"] = hex16(out.checksum());
  std::string text = dump(header);
  if (text.size() > H) throw Error(what + ": header grew past its reserved space (internal error)");
  text.append(H - text.size(), ' ');
  if (::pwrite(fd, text.data(), text.size(), 16) != static_cast<ssize_t>(text.size()))
    throw Error(sys_error("cannot write", tmp));
  if (::fsync(fd) != 0) throw Error(sys_error("cannot fsync", tmp));
  if (log)
    log(what + ": " + std::to_string(n_docs) + " documents, " + mb(static_cast<double>(text_bytes)) + " of text -> " +
        std::to_string(out.count()) + " tokens in " + format_duration(wall_seconds() - t0));
}

}  // namespace

// ---- TokenShard ----

std::unique_ptr<TokenShard> TokenShard::open(const std::string& path, bool verify_checksum) {
  const std::string what = "token shard " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(sys_error("cannot open token shard", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(sys_error("cannot stat token shard", path));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 16) {
    ::close(fd);
    throw Error(what + ": truncated (" + std::to_string(size) + " bytes, shorter than the 16-byte preamble)");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw Error(sys_error("cannot map token shard", path));
  std::unique_ptr<TokenShard> s(new TokenShard());
  s->path_ = path;
  s->map_ = map;
  s->map_size_ = size;
  const auto* base = static_cast<const unsigned char*>(map);
  if (std::memcmp(base, kMagic, 8) != 0) throw Error(what + ": bad magic (not a mnemo token shard)");
  const uint64_t H = load_le(base + 8, 8);
  if (H > size - 16) throw Error(what + ": truncated (header of " + std::to_string(H) + " bytes, file of " +
                                 std::to_string(size) + ")");
  try {
    s->header_ = parse_json_text(std::string(reinterpret_cast<const char*>(base + 16), H), "");
  } catch (const Error& e) {
    throw Error(what + ": corrupted (its JSON header does not parse: " + e.what() + ")");
  }
  const json& h = s->header_;
  auto field = [&](const char* key) { return h.is_object() && h.contains(key) ? h.at(key) : json(); };
  if (field("format") != 1) throw Error(what + ": unsupported header (format " + dump(field("format")) + ", expected 1)");
  const json dtype = field("dtype"), n = field("n_tokens");
  if (dtype != "uint16" && dtype != "uint32") throw Error(what + ": unknown dtype " + dump(dtype) + " in its header");
  if (!n.is_number_integer() || n.get<int64_t>() < 0 || !field("token_checksum").is_string())
    throw Error(what + ": header lacks n_tokens / token_checksum");
  s->width_ = dtype == "uint16" ? 2 : 4;
  s->n_tokens_ = n.get<int64_t>();
  const uint64_t data_offset = (16 + H + 7) / 8 * 8;
  const uint64_t expected = data_offset + static_cast<uint64_t>(s->n_tokens_) * s->width_;
  if (size < expected)
    throw Error(what + ": truncated (" + std::to_string(size) + " bytes, its header says " + std::to_string(expected) + ")");
  if (size != expected)
    throw Error(what + ": size " + std::to_string(size) + " bytes does not match its header (" +
                std::to_string(expected) + " expected)");
  s->tokens_ = base + data_offset;
  if (verify_checksum) {
    const std::string sum = hex16(fnv1a(kFnvOffset, s->tokens_, static_cast<size_t>(s->n_tokens_) * s->width_));
    if (sum != h.at("token_checksum").get<std::string>())
      throw Error(what + ": corrupted (token checksum " + sum + ", its header says " +
                  h.at("token_checksum").get<std::string>() + ")");
  }
  return s;
}

void TokenShard::release() {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
  tokens_ = nullptr;
}

TokenShard::~TokenShard() { release(); }

TokenShard::TokenShard(TokenShard&& o) noexcept { *this = std::move(o); }

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  if (this == &o) return *this;
  release();
  path_ = std::move(o.path_);
  header_ = std::move(o.header_);
  map_ = o.map_;
  map_size_ = o.map_size_;
  tokens_ = o.tokens_;
  width_ = o.width_;
  n_tokens_ = o.n_tokens_;
  starts_mutex_ = std::move(o.starts_mutex_);
  starts_ = std::move(o.starts_);
  starts_built_ = o.starts_built_;
  o.map_ = nullptr;
  o.tokens_ = nullptr;
  o.n_tokens_ = 0;
  o.starts_mutex_ = std::make_unique<std::mutex>();
  o.starts_built_ = false;
  return *this;
}

int64_t TokenShard::token(int64_t i) const {
  if (i < 0 || i >= n_tokens_)
    throw Error("token shard " + path_ + ": token " + std::to_string(i) + " is outside [0, " + std::to_string(n_tokens_) + ")");
  return static_cast<int64_t>(load_le(tokens_ + i * width_, width_));
}

void TokenShard::read(int64_t start, int64_t n, int64_t* out) const {
  if (start < 0 || n < 0 || start > n_tokens_ || n > n_tokens_ - start)
    throw Error("token shard " + path_ + ": read of " + std::to_string(n) + " tokens at " + std::to_string(start) +
                " is outside [0, " + std::to_string(n_tokens_) + ")");
  const unsigned char* p = tokens_ + start * width_;
  if (width_ == 2) {
    for (int64_t k = 0; k < n; ++k, p += 2) out[k] = static_cast<int64_t>(p[0] | (uint32_t(p[1]) << 8));
  } else {
    for (int64_t k = 0; k < n; ++k, p += 4) out[k] = static_cast<int64_t>(load_le(p, 4));
  }
}

const std::vector<int64_t>& TokenShard::document_starts() const {
  std::lock_guard<std::mutex> lock(*starts_mutex_);
  if (starts_built_) return starts_;
  const int64_t bos = header_.value("bos_id", int64_t(-1)), eos = header_.value("eos_id", int64_t(-1));
  std::vector<int64_t> starts;
  std::vector<int64_t> buf(1 << 16);
  if (bos >= 0 || eos >= 0) {
    if (bos < 0 && n_tokens_ > 0) starts.push_back(0);
    const int64_t mark = bos >= 0 ? bos : eos, shift = bos >= 0 ? 0 : 1;
    for (int64_t at = 0; at < n_tokens_; at += static_cast<int64_t>(buf.size())) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), n_tokens_ - at);
      read(at, n, buf.data());
      for (int64_t k = 0; k < n; ++k)
        if (buf[k] == mark && at + k + shift < n_tokens_) starts.push_back(at + k + shift);
    }
  } else if (n_tokens_ > 0) {
    starts.push_back(0);
  }
  starts_ = std::move(starts);
  starts_built_ = true;
  return starts_;
}

// ---- building and reuse ----

std::string ensure_token_shard(const CorpusSpec& corpus, CorpusSplit split, const Tokenizer& tok,
                               const std::string& cache_dir, const std::function<void(const std::string&)>& log) {
  if (cache_dir.empty()) throw Error("token shard: empty cache directory");
  const int64_t vocab = tok.vocab_size();
  if (vocab <= 0 || vocab > (int64_t(1) << 32))
    throw Error("tokenizer " + tok.id() + ": a vocabulary of " + std::to_string(vocab) +
                " ids does not fit a token shard (ids must be < 2^32)");
  const std::vector<CorpusFile> files = list_corpus_files(corpus);
  json file_list = json::array();
  std::string key_text = tok.id() + "\n" + dump(corpus.to_json()) + "\n" + split_name(split) + "\n";
  for (const auto& f : files) {
    file_list.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
    key_text += f.path + " " + f.sha256 + "\n";
  }
  const fs::path dir = fs::path(cache_dir) / "shards";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("token shard: cannot create " + dir.string() + ": " + ec.message());
  const fs::path target = dir / (split_name(split) + "-" + sha256_hex(key_text).substr(0, 16) + ".bin");
  const std::string path = target.string();

  json header = {{"format", 1},
                 {"tokenizer", tok.id()},
                 {"vocab_size", vocab},
                 {"bos_id", tok.bos_id()},
                 {"eos_id", tok.eos_id()},
                 {"dtype", vocab <= 65536 ? "uint16" : "uint32"},
                 {"split", split_name(split)},
                 {"corpus", corpus.to_json()},
                 {"files", file_list},
                 {"created_at", now_iso8601()}};
  if (fs::exists(target, ec)) {
    std::string why;
    try {
      why = mismatch(TokenShard::open(path, true)->header(), header);
    } catch (const Error& e) {
      why = e.what();
    } catch (const json::exception&) {
      why = "its header has fields of the wrong type";
    }
    if (why.empty()) {
      if (log) log("token shard " + split_name(split) + ": reusing " + path);
      return path;
    }
    if (log) log("token shard " + split_name(split) + ": rebuilding " + path + ": " + why);
  } else if (log) {
    const std::string why = changed_since_previous(dir, header);
    log("token shard " + split_name(split) + ": building " + path + (why.empty() ? "" : " (" + why + ")"));
  }
  remove_stale_temporaries(target);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    build_shard(corpus, split, tok, header, tmp, log);
    fs::rename(tmp, target, ec);
    if (ec) throw Error("token shard: cannot rename " + tmp + " to " + path + ": " + ec.message());
  } catch (...) {
    std::error_code rec;
    fs::remove(tmp, rec);
    throw;
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {  // the rename itself
    ::fsync(dfd);
    ::close(dfd);
  }
  return path;
}

// ---- bits per byte ----

std::vector<int32_t> token_byte_lengths(const Tokenizer& tok) {
  const int64_t vocab = tok.vocab_size();
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(vocab, 0)), 0);
  if (dynamic_cast<const ByteTokenizer*>(&tok)) {
    for (int64_t i = 0; i < vocab && i < 256; ++i) out[i] = 1;
    return out;
  }
  const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tok);
  if (!sp) throw Error("token_byte_lengths: tokenizer " + tok.id() + " is neither byte-level nor SentencePiece");
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary
  for (int64_t i = 0; i < vocab; ++i) {
    if (sp->is_control(i) || sp->is_unknown(i)) continue;
    if (sp->is_byte_piece(i)) {
      out[i] = 1;
      continue;
    }
    const std::string piece = sp->id_to_piece(i);
    size_t n = piece.size();
    for (size_t k = piece.find(kSpace); k != std::string::npos; k = piece.find(kSpace, k + 3)) n -= 2;  // 3 bytes -> 1
    out[i] = static_cast<int32_t>(n);
  }
  return out;
}

}  // namespace mnemo
