#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/common.h"
#include "core/parse_int.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

std::atomic<int64_t> g_written{0};
std::atomic<int64_t> g_limit_override{-2};  // -2: none (the environment decides)

// MNEMO_FAIL_WRITE_AFTER_BYTES: the number of bytes the checked writes may take in all (-1: no limit).
int64_t injected_limit() {
  if (const int64_t o = g_limit_override.load(); o != -2) return o;
  static const int64_t limit = [] {
    const char* env = std::getenv("MNEMO_FAIL_WRITE_AFTER_BYTES");
    if (!env || !*env) return int64_t{-1};
    const auto v = parse_whole_int(env);
    if (!v || *v < 0) {
      std::fprintf(stderr, "mnemo: error: MNEMO_FAIL_WRITE_AFTER_BYTES must be a whole number >= 0, got '%s'\n", env);
      std::exit(1);
    }
    return static_cast<int64_t>(*v);
  }();
  return limit;
}

}  // namespace

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  if (const int64_t limit = injected_limit(); limit >= 0) {
    const int64_t before = g_written.fetch_add(static_cast<int64_t>(n));
    if (before + static_cast<int64_t>(n) > limit) {
      const size_t allowed = before >= limit ? 0 : static_cast<size_t>(limit - before);
      if (allowed > 0) write_all(fd, p, allowed, what);  // what a disk filling up mid-write leaves
      errno = ENOSPC;
      throw Error("cannot write " + what + ": " + std::strerror(ENOSPC));
    }
  }
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error("cannot write " + what + ": " + std::strerror(errno));
    if (w == 0) throw Error("cannot write " + what + ": the write took no bytes");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void inject_write_failure_after(int64_t bytes) {
  g_written.store(0);
  g_limit_override.store(bytes < 0 ? -1 : bytes);
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a folder (EINVAL): the renames are then as durable as they get.
  if (rc != 0 && !(directory && (err == EINVAL || err == ENOTSUP)))
    throw Error("cannot sync " + path + " to disk: " + std::strerror(err));
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the folder " + dir.string() + " for " + path + ": " + ec.message());
  tmp_ = path + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the file is already closed");
  write_all(fd_, data, n, path_);
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the file is already closed");
  if (::fsync(fd_) != 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw Error("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(errno));
  committed_ = true;
  const fs::path target(path_);
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".", true);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void check_stdout() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (!flushed || std::ferror(stdout) || !std::cout.good()) {
    std::clearerr(stdout);
    std::cout.clear();
    throw Error(std::string("cannot write to the standard output: ") +
                (err != 0 ? std::strerror(err) : "the output stream failed"));
  }
}

}  // namespace mnemo
