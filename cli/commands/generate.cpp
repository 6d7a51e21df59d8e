// `mnemo generate TASK [--param value ...] --n N --seed S [--split train|test] --out FILE.jsonl`
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands/commands.h"
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
    json params = extras_to_params(sub->remaining());
    // `mnemo generate mad --task selective_copying ...` == `mnemo generate mad_selective_copying ...`
    const std::string task_name = resolve_task_alias(a.task, params);
    if (task_name != a.task) params.erase("task");
    auto task = TaskRegistry::instance().make(task_name, params);
    auto rows = task->generate_rows(a.split == "train" ? Split::train : Split::test, a.n, a.seed);
    std::filesystem::path out(a.out);
    if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
    const std::string tmp = a.out + ".tmp";
    {
      std::ofstream f(tmp);
      if (!f) throw Error("cannot write " + a.out);
      for (const auto& r : rows) f << r.dump() << "\n";
      if (!f) throw Error("write failed: " + a.out);
    }
    std::filesystem::rename(tmp, a.out);
    std::cout << "wrote " << rows.size() << " examples of " << task_name << " " << task->params().dump() << " to "
              << a.out << "\n";
  });
}

}  // namespace mnemo::cli
