#include "core/file_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace mnemo {

namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return std::remove(path) == 0 ? 0 : errno;  // FTW_DEPTH: children before their folder; nonzero stops the walk
}

}  // namespace

void remove_tree(const std::string& path, std::error_code& ec) {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::generic_category());
    return;
  }
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc > 0) ec = std::error_code(rc, std::generic_category());
  else if (rc < 0) ec = std::error_code(errno, std::generic_category());
}

}  // namespace mnemo
