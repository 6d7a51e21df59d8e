// Data files built into the binary: the build copies each listed file's text into a generated source
// (cmake/embed_files.cmake), so the program reads its tables with no install step and no path to find at run time,
// and a change to a file rebuilds only that generated source.
#pragma once
#include <string>
#include <vector>

namespace mnemo {

struct EmbeddedFile {
  const char* path;  // relative to the repository root, e.g. "reports/papers/language_modelling.json"
  const char* text;  // the file's bytes as they are in the repository
};

}  // namespace mnemo
