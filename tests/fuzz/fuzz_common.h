// Shared by the fuzz targets: the rule a parser must keep, and scratch files for parsers that read paths.
//
// The rule (docs/cli.md#errors-and-exit-status): any input ends either in a result or in one mnemo::Error whose
// message names the file/field/value. Anything else escaping a parser — a JSON library exception
// (json::type_error names no file or field), a LibTorch error, std::out_of_range, ... — is a finding: the
// target prints it and aborts, so libFuzzer saves the input. Crashes, sanitizer reports, leaks of
// time (-timeout) and memory (-rss_limit_mb) are findings too.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "core/common.h"

namespace mnemo_fuzz {

// Calls fn(); mnemo::Error is the accepted outcome of bad input, every other exception aborts.
template <typename F>
int guarded(F&& fn) {
  try {
    fn();
  } catch (const mnemo::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: %s escaped the parser: %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz finding: a non-std exception escaped the parser\n");
    std::abort();
  }
  return 0;
}

// A per-process scratch folder (removed and recreated on first use).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("mnemo-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const auto path = scratch_dir() / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace mnemo_fuzz
