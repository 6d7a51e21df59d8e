// Removing a folder tree without std::filesystem::remove_all.
//
// Why: the pip wheels of torch 2.x export their own copy of std::filesystem::remove_all, and the dynamic linker
// binds mnemo's calls to it (libtorch.so is loaded before libstdc++). On the GPU machine (torch 2.11) that copy
// jumped to address 0: `mnemo train` died with SIGSEGV at its second checkpoint, when the previous checkpoint
// folder is removed (cuda-gdb: the return address was remove_all in libtorch.so). POSIX nftw has no such twin.
#pragma once
#include <string>
#include <system_error>

namespace mnemo {

// Removes `path` and everything below it, links themselves and not their targets (as remove_all). A missing
// path is not an error. On failure `ec` holds the first error and the walk stops.
void remove_tree(const std::string& path, std::error_code& ec);

}  // namespace mnemo
