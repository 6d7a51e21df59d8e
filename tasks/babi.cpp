#include "tasks/babi.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "tasks/scoring.h"
#include "tasks/text_utils.h"

namespace mnemo {

namespace fs = std::filesystem;

namespace {
struct Line {
  int64_t id = 0;
  std::string text;
  bool is_question = false;
  std::string answer;
  std::vector<int64_t> refs;
};

int64_t parse_id(const std::string& s, const std::string& where) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || v < 1) throw Error(where + ": expected a positive line ID, got '" + s + "'");
  return v;
}
}  // namespace

std::vector<BabiSample> parse_babi(const std::string& text, const std::string& source) {
  const std::string body = strip(text);
  std::vector<BabiSample> out;
  std::vector<Line> story;
  int64_t story_index = -1;
  size_t start = 0;
  int64_t line_no = 0;
  while (start <= body.size() && !body.empty()) {
    auto p = body.find('\n', start);
    if (p == std::string::npos) p = body.size();
    std::string raw = body.substr(start, p - start);
    start = p + 1;
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string where = source + ":" + std::to_string(line_no);
    const auto sp = raw.find(' ');
    if (sp == std::string::npos) throw Error(where + ": expected 'ID text', got '" + raw + "'");
    Line line;
    line.id = parse_id(raw.substr(0, sp), where);
    const std::string rest = raw.substr(sp + 1);
    const auto tab = rest.find('\t');
    if (tab == std::string::npos) {
      line.text = strip(rest);
    } else {
      line.is_question = true;
      line.text = strip(rest.substr(0, tab));
      const std::string after = rest.substr(tab + 1);
      const auto tab2 = after.find('\t');
      line.answer = strip(after.substr(0, tab2));
      if (line.answer.empty()) throw Error(where + ": question without an answer");
      if (tab2 != std::string::npos)
        for (const auto& tok : split_on_spaces(collapse_whitespace(strip(after.substr(tab2 + 1)))))
          if (!tok.empty()) line.refs.push_back(parse_id(tok, where));
    }
    if (line.id == 1) {
      story.clear();
      ++story_index;
    } else if (story_index < 0) {
      throw Error(where + ": the first story does not start with ID 1");
    }
    if (line.is_question) {
      BabiSample s;
      s.question = line.text;
      s.answer = line.answer;
      s.supporting_ids = line.refs;
      s.story = story_index;
      for (const auto& l : story) {
        if (l.is_question) continue;
        s.facts.push_back(l.text);
        s.fact_ids.push_back(l.id);
        for (int64_t r : line.refs)
          if (r == l.id) s.references.push_back(l.text);
      }
      out.push_back(std::move(s));
    }
    story.push_back(std::move(line));
  }
  if (out.empty()) throw Error(source + ": no bAbI questions found");
  return out;
}

std::string babi_task_file(int task, Split split, const std::string& babi_dir, bool* fallback_used) {
  if (task < 1 || task > 20) throw Error("bAbI: task number must be in 1..20, got " + std::to_string(task));
  if (fallback_used) *fallback_used = false;
  const std::string prefix = "qa" + std::to_string(task) + "_";
  const std::string suffix = std::string("_") + split_name(split) + ".txt";
  auto find_in = [&](const fs::path& dir) -> std::string {
    if (!fs::is_directory(dir)) return "";
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return e.path().string();
    }
    return "";
  };
  const std::string dir = resolve_data_file(babi_dir, "bAbI folder");
  std::string found = find_in(dir);
  if (found.empty() && fs::path(dir).filename() == "en-10k") {
    found = find_in(fs::path(dir).parent_path() / "en");
    if (!found.empty() && fallback_used) *fallback_used = true;
  }
  if (found.empty())
    throw Error("bAbI: no file " + prefix + "*" + suffix + " in '" + dir + "'");
  return found;
}

const std::vector<BabiSample>& load_babi_file(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<std::vector<BabiSample>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<std::vector<BabiSample>>(parse_babi(read_text_file(path), path));
  return *slot;
}

}  // namespace mnemo
