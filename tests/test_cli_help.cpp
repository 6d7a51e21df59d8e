// Every command's --help (and `mnemo` alone) ends with an example that works as pasted: the examples are read
// back from the help text, the cheap ones run in order in a scratch checkout layout (configs/ and ../shared as in
// the repository), the others are checked against their command's options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"

using mnemo::test::CommandResult;
namespace fs = std::filesystem;

namespace {

CommandResult run_in(const fs::path& dir, const std::string& args) {
  const std::string cmd = "cd '" + dir.string() + "' && " + std::string(MNEMO_BINARY) + " " + args + " 2>&1";
  return mnemo::test::run_shell(cmd);
}

// The names listed under a help text's "Subcommands:" heading.
std::vector<std::string> subcommands_in(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream in(help);
  std::string line;
  bool in_list = false;
  while (std::getline(in, line)) {
    if (line.rfind("Subcommands:", 0) == 0 || line.rfind("SUBCOMMANDS:", 0) == 0) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(  ([a-z][a-z0-9-]*)(\s.*)?)")))
      names.push_back(m[1].str());
    else if (!line.empty() && line[0] != ' ')
      in_list = false;
  }
  return names;
}

// The lines after "Example:" / "Examples:" that start with "  mnemo ".
std::vector<std::string> examples_in(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  std::string line;
  bool in_examples = false;
  while (std::getline(in, line)) {
    if (line == "Example:" || line == "Examples:") {
      in_examples = true;
      continue;
    }
    if (in_examples && line.rfind("  mnemo ", 0) == 0) out.push_back(line.substr(2));
    else if (in_examples) in_examples = false;
  }
  return out;
}

// Shell-like words of an example (single quotes group words).
std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') quoted = !quoted, any = true;
    else if (c == ' ' && !quoted) {
      if (any) words.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
      any = true;
    }
  }
  if (any) words.push_back(cur);
  return words;
}

}  // namespace

TEST_CASE("cli: mnemo alone and every command's --help end with an example that works", "[cli][help]") {
  const fs::path scratch = mnemo::test::temp_dir("help_examples");
  const fs::path work = scratch / "mnemo";  // a checkout's layout: configs/ here, the shared folder beside it
  fs::create_directories(work);
  fs::create_directory_symlink(fs::path(MNEMO_SOURCE_DIR) / "configs", work / "configs");
  fs::create_directory_symlink(fs::absolute(fs::path(MNEMO_SOURCE_DIR) / ".." / "shared"), scratch / "shared");

  auto bare = run_in(work, "");
  INFO(bare.output);
  REQUIRE(bare.exit_code == 0);
  REQUIRE_FALSE(examples_in(bare.output).empty());

  // Every command path, with its help's examples, in the order the help tree lists them.
  std::vector<std::pair<std::string, std::vector<std::string>>> commands;
  std::vector<std::string> todo = subcommands_in(bare.output);
  REQUIRE(todo.size() >= 15);
  std::map<std::string, std::string> helps;
  for (size_t i = 0; i < todo.size(); ++i) {
    const std::string path = todo[i];
    auto h = run_in(work, path + " --help");
    INFO("mnemo " << path << " --help\n" << h.output);
    REQUIRE(h.exit_code == 0);
    const auto examples = examples_in(h.output);
    CHECK_FALSE(examples.empty());  // an "Example:" block
    for (const auto& e : examples) CHECK(e.rfind("mnemo " + path, 0) == 0);  // an example of this command
    helps[path] = h.output;
    commands.emplace_back(path, examples);
    for (const auto& sub : subcommands_in(h.output)) todo.push_back(path + " " + sub);
  }

  // Cheap examples run in this order (train writes what eval, export, runs and report read); the rest need
  // a network, a long sweep or inputs of the user's own, and are checked against their command's options.
  const std::vector<std::string> run_order = {"models",  "tasks", "generate",  "train",          "eval",
                                              "export",  "runs",  "report",    "tokenizer info", "tokenizer encode",
                                              "tokenizer", "run learnability", "run", "check-kernel"};
  std::set<std::string> ran;
  for (const std::string& path : run_order) {
    auto it = std::find_if(commands.begin(), commands.end(), [&](const auto& c) { return c.first == path; });
    REQUIRE(it != commands.end());
    for (const std::string& example : it->second) {
      auto r = run_in(work, example.substr(6));
      INFO("in " << work.string() << ": " << example << "\n" << r.output);
      CHECK(r.exit_code == 0);
    }
    ran.insert(path);
  }
  for (const auto& [path, examples] : commands) {
    if (ran.count(path)) continue;
    const std::string& help = helps[path];
    for (const std::string& example : examples)
      for (const std::string& word : words_of(example))
        if (word.rfind("--", 0) == 0) {
          INFO("mnemo " << path << ": example '" << example << "' uses " << word);
          CHECK(help.find(word.substr(0, word.find('='))) != std::string::npos);
        }
  }
  for (const std::string& example : examples_in(bare.output)) {  // mnemo's own: commands checked above
    const auto words = words_of(example);
    REQUIRE(words.size() >= 2);
    CHECK(helps.count(words[1]) == 1);
  }
}
