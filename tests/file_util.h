// Reading a file whole in the tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mnemo::test {

// The bytes of a file; "" when it cannot be read (tests compare or print it; core's read_text_file throws).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace mnemo::test
