// The zero-shot task registry and the paper groups (docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext, docs/tasks.md#recall-intensive-qa).
#include "tasks/harness/task_registry.h"

#include <algorithm>

#include "tasks/harness/py_compat.h"
#include "tasks/harness/recall_tasks.h"
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

namespace {
// docs/tasks.md#zero-shot-commonsense-lambada-and-wikitext: the columns each paper prints (LAMBADA's ppl and acc both come from lambada_openai).
const std::vector<std::pair<std::string, std::vector<std::string>>>& groups() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> g = {
      // Titans, Miras, Atlas (the Gated DeltaNet protocol): Wiki ppl, LMB ppl/acc, PIQA, Hella, Wino, ARC-e,
      // ARC-c, SIQA, BoolQ.
      {"commonsense",
       {"wikitext", "lambada_openai", "piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "social_iqa",
        "boolq"}},
      // MoM: Wiki ppl, Lamb ppl, ARC-e, ARC-c, Hella, Lamb acc, PIQA, Wino.
      {"commonsense_mom", {"wikitext", "lambada_openai", "arc_easy", "arc_challenge", "hellaswag", "piqa", "winogrande"}},
      // Lattice: PIQA, Hella, Wino, ARC-e, ARC-c, CSQA, BoolQ.
      {"commonsense_lattice",
       {"piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "commonsense_qa", "boolq"}},
      // docs/tasks.md#recall-intensive-qa: the recall-intensive tasks in MoM Table 2's column order (FDA, SWDE, SQuAD, NQ, TriviaQA,
      // Drop); their "Just read twice" prompts (JRT) as a group of their own.
      {"recall", {"fda", "swde", "squad_completion", "nq", "triviaqa", "drop"}},
      {"recall_twice", {"fda_twice", "swde_twice", "squad_completion_twice", "nq_twice", "triviaqa_twice", "drop_twice"}},
  };
  return g;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// "unknown task 'x'; did you mean: a, b? (tasks: ...; groups: ...)"
Error unknown_name(const std::string& name, bool allow_groups) {
  std::vector<std::string> known = harness_task_names();
  if (allow_groups)
    for (const auto& [g, members] : groups()) known.push_back(g);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& k : known) {
    const size_t d = edit_distance(name, k);
    const bool related = k.find(name) != std::string::npos || (!k.empty() && name.find(k) != std::string::npos);
    if (d <= std::max<size_t>(2, k.size() / 3) || (related && name.size() >= 3)) scored.push_back({d, k});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> close;
  for (size_t i = 0; i < scored.size() && i < 5; ++i) close.push_back(scored[i].second);
  std::vector<std::string> group_names;
  for (const auto& [g, members] : groups()) group_names.push_back(g);
  return Error("unknown task '" + name + "'" + (close.empty() ? "" : "; did you mean: " + join(close) + "?") +
               " (tasks: " + join(harness_task_names()) + (allow_groups ? "; groups: " + join(group_names) : "") + ")");
}
}  // namespace

std::vector<std::string> harness_task_names() {
  std::vector<std::string> names = spec_task_names();
  for (const char* n : {"winogrande", "lambada_openai", "wikitext"}) names.push_back(n);
  for (const auto& n : recall_task_names()) names.push_back(n);
  return names;
}

std::unique_ptr<HarnessTask> make_harness_task(const std::string& name) {
  if (auto t = make_spec_task(name)) return t;
  if (name == "winogrande") return make_winogrande_task();
  if (name == "lambada_openai") return make_lambada_openai_task();
  if (name == "wikitext") return make_wikitext_task();
  if (auto t = make_recall_task(name)) return t;
  throw unknown_name(name, false);
}

std::vector<std::string> expand_harness_tasks(const std::vector<std::string>& names_or_groups) {
  const auto known = harness_task_names();
  std::vector<std::string> out;
  auto add = [&out](const std::string& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& entry : names_or_groups) {
    size_t pos = 0;
    while (pos <= entry.size()) {  // comma lists: "piqa,arc_easy"
      size_t comma = entry.find(',', pos);
      if (comma == std::string::npos) comma = entry.size();
      const std::string name = py::strip(entry.substr(pos, comma - pos));
      pos = comma + 1;
      if (name.empty()) continue;
      const auto g = std::find_if(groups().begin(), groups().end(), [&](const auto& x) { return x.first == name; });
      if (g != groups().end()) {
        for (const auto& t : g->second) add(t);
      } else if (std::find(known.begin(), known.end(), name) != known.end()) {
        add(name);
      } else {
        throw unknown_name(name, true);
      }
    }
  }
  if (out.empty()) {
    std::string names;
    for (const auto& [g, members] : groups()) names += (names.empty() ? "" : ", ") + g;
    throw Error("no task named (give task names or a group: " + names + ")");
  }
  return out;
}

}  // namespace mnemo::harness
