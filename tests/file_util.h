// Files in the tests: reading one whole, writing one, a temporary folder, a scoped data directory.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/common.h"
#include "core/file_tree.h"

namespace mnemo::test {

// The bytes of a file; "" when it cannot be read (tests compare or print it; core's read_text_file throws).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Writes `text` to `p`, creating its folders.
inline void write_text_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Removes a folder tree as std::filesystem::remove_all does, through mnemo::remove_tree: the pip wheels of torch 2.x
// carry a remove_all of their own that crashed (core/file_tree.h), and these tests also run against that LibTorch.
inline void remove_dir_tree(const std::filesystem::path& p, std::error_code& ec) { mnemo::remove_tree(p.string(), ec); }
inline void remove_dir_tree(const std::filesystem::path& p) {
  std::error_code ec;
  mnemo::remove_tree(p.string(), ec);
  if (ec) throw std::filesystem::filesystem_error("remove_all", p, ec);
}

// A fresh directory under the system temp dir (unique per process and object), removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("mnemo_test_" + tag + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    remove_dir_tree(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    remove_dir_tree(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Points the data directory at `dir` for the lifetime of the object.
struct ScopedDataDir {
  std::string old = data_dir();
  explicit ScopedDataDir(const std::filesystem::path& dir) { set_data_dir(dir.string()); }
  ~ScopedDataDir() { set_data_dir(old); }
};

// The records of a JSONL file (blank lines skipped); a malformed line throws json's parse error.
inline std::vector<json> read_jsonl(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

}  // namespace mnemo::test
