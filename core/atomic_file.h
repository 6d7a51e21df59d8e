// Files that appear whole or not at all, and writes that are all checked.
//
// AtomicFile writes PATH.tmp.<pid> with write(2), checking every call (a full disk, a file size limit, an I/O
// error), then fsyncs it, renames it over PATH and fsyncs the folder. If anything fails, or the object is destroyed
// before commit(), the temporary file is removed: a reader sees the old PATH or the new one, never a truncated file.
// Failures are Errors naming PATH and the OS error ("cannot write out/results.json: No space left on device").
//
// Fault injection for tests: MNEMO_FAIL_WRITE_AFTER_BYTES=N makes the checked writes of this process fail with
// ENOSPC once N bytes in all have gone through write_all (as a disk that fills up at that point would).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mnemo {

// Writes all `n` bytes to `fd` (EINTR retried); throws Error "cannot write <what>: <OS error>" on failure.
void write_all(int fd, const void* data, size_t n, const std::string& what);

// fsync of a file or a folder; Error naming it on failure (a folder on a file system that cannot sync one is fine).
void fsync_path(const std::string& path, bool directory);

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // creates the folder and opens the temporary file
  ~AtomicFile();                                 // without commit(): closes and removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  // fsync + close (both checked) + rename over the final path + folder fsync.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// `bytes` into `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Tests in one process: as MNEMO_FAIL_WRITE_AFTER_BYTES=bytes from now on (the count starts again at 0); -1: off.
void inject_write_failure_after(int64_t bytes);

// Flushes std::cout and stdout and checks that they took every byte (`mnemo score ... > /dev/full` must not exit 0);
// Error naming the OS error otherwise.
void check_stdout();

}  // namespace mnemo
