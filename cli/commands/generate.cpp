// `mnemo generate TASK [--param value ...] --n N --seed S [--split train|test] --out FILE.jsonl`
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/atomic_file.h"
#include "tasks/mad_tasks.h"
#include "tasks/task.h"

namespace mnemo::cli {

namespace {
struct GenerateArgs {
  std::string task, out, split = "train";
  int64_t n = 100;
  uint64_t seed = 0;
};
}  // namespace

void add_generate_command(CLI::App& app) {
  static GenerateArgs a;
  auto* sub = app.add_subcommand("generate",
                                 "Write a task's examples as JSONL; task parameters are flags "
                                 "(e.g. mnemo generate mqar --vocab-size 8192 --seq-len 64 --num-kv-pairs 4)");
  sub->add_option("task", a.task, "Task name (see `mnemo tasks`; `mad --task T` for the MAD tasks)")->required();
  sub->add_option("--n", a.n, "Number of examples")->check(CLI::PositiveNumber);
  sub->add_option("--seed", a.seed, "Base seed (example i uses a seed derived from it)");
  sub->add_option("--split", a.split, "train | test (disjoint seed ranges)")->check(CLI::IsMember({"train", "test"}));
  sub->add_option("--out", a.out, "Output JSONL file")->required();
  sub->allow_extras();
  sub->callback([sub] {
    // All rows are built in memory before the file is written: refuse what cannot fit instead of std::bad_alloc.
    constexpr int64_t kMaxExamples = 10'000'000;
    if (a.n > kMaxExamples)
      throw Error("generate: --n " + std::to_string(a.n) + " is more than one file holds (at most " +
                  std::to_string(kMaxExamples) + " examples); write several files with disjoint --seed ranges");
    std::error_code ec;
    if (std::filesystem::is_directory(a.out, ec))
      throw Error("generate: --out " + a.out + " is a directory; give a file name, e.g. " +
                  (std::filesystem::path(a.out) / (a.task + ".jsonl")).string());
    json params = extras_to_params(sub->remaining());
    // `mnemo generate mad --task selective_copying ...` == `mnemo generate mad_selective_copying ...`
    const std::string task_name = resolve_task_alias(a.task, params);
    if (task_name != a.task) params.erase("task");
    auto task = TaskRegistry::instance().make(task_name, params);
    std::vector<json> rows;
    try {
      rows = task->generate_rows(a.split == "train" ? Split::train : Split::test, a.n, a.seed);
    } catch (const std::bad_alloc&) {
      throw Error("generate: not enough memory for " + std::to_string(a.n) + " examples of " + task_name +
                  "; use a smaller --n");
    }
    {
      AtomicFile f(a.out);  // OUT.tmp.<pid>, every write checked, renamed to OUT; removed on failure
      for (const auto& r : rows) f.write(r.dump() + "\n");
      f.commit();
    }
    std::cout << "wrote " << rows.size() << " examples of " << task_name << " " << task->params().dump() << " to "
              << a.out << "\n";
  });
}

}  // namespace mnemo::cli
