#include "tasks/harness/qa_metrics.h"

#include <algorithm>
#include <map>

#include "tasks/harness/py_compat.h"

namespace mnemo::harness {

int64_t find_ignore_case(const std::u32string& haystack, const std::u32string& needle) {
  if (needle.empty()) return 0;
  const std::u32string h = py::lower(haystack), n = py::lower(needle);
  const auto it = std::search(h.begin(), h.end(), n.begin(), n.end());
  return it == h.end() ? -1 : static_cast<int64_t>(it - h.begin());
}

int64_t find_ignore_case(const std::string& haystack, const std::string& needle) {
  return find_ignore_case(py::decode_utf8(haystack), py::decode_utf8(needle));
}

int64_t contains_score(const std::string& prediction, const std::vector<std::string>& labels) {
  if (labels.empty()) throw Error("contains: no gold labels (the reference's max() over none raises)");
  const std::u32string pred = py::decode_utf8(prediction);
  for (const auto& l : labels)
    if (find_ignore_case(pred, py::decode_utf8(l)) >= 0) return 1;
  return 0;
}

namespace {
// Python's \w for str patterns (str.isalnum() or '_'): exact for ASCII and Latin-1; above Latin-1 every character
// counts as a word character except white space and the punctuation / symbol blocks listed (an approximation of
// Unicode's categories; it matters only for an article written against such a character).
bool word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c < 0x100)
    return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA || (c >= 0xBC && c <= 0xBE) ||
           (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  if (py::isspace(c)) return false;
  const std::pair<char32_t, char32_t> non_word[] = {
      {0x2000, 0x206F}, {0x20A0, 0x20CF}, {0x2190, 0x2BFF}, {0x3000, 0x303F}, {0xFE30, 0xFE4F},
      {0xFF00, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0xFFF0, 0xFFFF}, {0x1F000, 0x1FAFF}};
  for (const auto& [lo, hi] : non_word)
    if (c >= lo && c <= hi) return false;
  return true;
}

bool ascii_punctuation(char32_t c) {
  static const std::u32string p = U"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";  // string.punctuation
  return c < 0x80 && p.find(c) != std::u32string::npos;
}

std::vector<std::u32string> split_whitespace(const std::u32string& s) {  // str.split()
  std::vector<std::u32string> out;
  std::u32string cur;
  for (char32_t c : s) {
    if (py::isspace(c)) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::u32string normalize(const std::string& s) {
  std::u32string lowered = py::lower(py::decode_utf8(s)), np;
  for (char32_t c : lowered)
    if (!ascii_punctuation(c)) np.push_back(c);
  // re.sub(r"\b(a|an|the)\b", " ", text): the alternation tries "a" before "an"; the boundaries look at the
  // original text, and scanning resumes after each replaced word.
  std::u32string out;
  for (size_t i = 0; i < np.size();) {
    bool replaced = false;
    if ((i == 0 || !word_char(np[i - 1])) && word_char(np[i])) {
      for (const std::u32string art : {U"a", U"an", U"the"}) {
        const size_t e = i + art.size();
        if (np.compare(i, art.size(), art) == 0 && (e == np.size() || !word_char(np[e]))) {
          out.push_back(U' ');
          i = e;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(np[i++]);
  }
  std::u32string joined;
  for (const auto& w : split_whitespace(out)) joined += (joined.empty() ? U"" : U" ") + w;
  return joined;
}

std::vector<std::u32string> tokens(const std::string& s) {  // get_tokens
  if (s.empty()) return {};
  return split_whitespace(normalize(s));
}
}  // namespace

std::string squad_normalize_answer(const std::string& s) { return py::encode_utf8(normalize(s)); }

int64_t squad_exact(const std::string& gold, const std::string& pred) { return normalize(gold) == normalize(pred) ? 1 : 0; }

double squad_f1(const std::string& gold, const std::string& pred) {
  const auto g = tokens(gold), p = tokens(pred);
  if (g.empty() || p.empty()) return g == p ? 1 : 0;
  std::map<std::u32string, int64_t> count;  // collections.Counter(gold) & Counter(pred)
  for (const auto& t : g) ++count[t];
  int64_t same = 0;
  for (const auto& t : p) {
    auto it = count.find(t);
    if (it != count.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0;
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(p.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(g.size());
  return (2 * precision * recall) / (precision + recall);
}

SquadScores squad_v2_raw_scores(const std::vector<std::string>& golds, const std::string& pred) {
  std::vector<std::string> kept;
  for (const auto& g : golds)
    if (!normalize(g).empty()) kept.push_back(g);
  if (kept.empty()) kept.push_back("");
  SquadScores s;
  for (size_t i = 0; i < kept.size(); ++i) {  // max(...) over the golds
    const double e = static_cast<double>(squad_exact(kept[i], pred)), f = squad_f1(kept[i], pred);
    s.exact = i == 0 ? e : std::max(s.exact, e);
    s.f1 = i == 0 ? f : std::max(s.f1, f);
  }
  return s;
}

}  // namespace mnemo::harness
