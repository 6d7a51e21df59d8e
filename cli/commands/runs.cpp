// `mnemo runs [--db FILE] [--json]`: the training runs of a results database, one line each, with the status as
// observed now ('crashed': the row says running but its process on this host is gone; `train --resume` adopts it).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "results/db.h"

namespace mnemo::cli {

void add_runs_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("runs", "List the training runs of a results database with their status");
  auto db_path = std::make_shared<std::string>(kDefaultDbPath);
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("--db", *db_path, "Results database (SQLite)")->capture_default_str();
  cmd->add_flag("--json", *as_json, "Machine-readable output");
  cmd->callback([db_path, as_json] {
    if (!std::filesystem::is_regular_file(*db_path))
      throw Error("results database " + *db_path + " does not exist or is not a file (pass --db FILE)");
    ResultsDB db(*db_path, OpenMode::read_only);
    json out = json::array();
    for (const RunInfo& r : db.runs()) {
      const RunProcess p = db.run_process(r.id);
      out.push_back({{"id", r.id}, {"status", db.observed_status(r)}, {"model", r.model}, {"task", r.task},
                     {"last_step", r.last_step}, {"updated_at", r.updated_at}, {"host", p.host}, {"pid", p.pid},
                     {"sweep", r.sweep}, {"out_dir", r.out_dir}, {"message", r.message}});
    }
    if (*as_json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("%5s  %-9s  %-16s  %-28s  %8s  %-20s  %s\n", "id", "status", "model", "task", "step", "updated",
                "out_dir / message");
    for (const json& r : out) {
      std::string tail = r["out_dir"].get<std::string>();
      if (!r["message"].get<std::string>().empty()) tail += "  " + r["message"].get<std::string>();
      std::printf("%5lld  %-9s  %-16s  %-28s  %8lld  %-20s  %s\n", (long long)r["id"].get<int64_t>(),
                  r["status"].get<std::string>().c_str(), r["model"].get<std::string>().c_str(),
                  r["task"].get<std::string>().c_str(), (long long)r["last_step"].get<int64_t>(),
                  r["updated_at"].get<std::string>().c_str(), tail.c_str());
    }
  });
}

}  // namespace mnemo::cli
