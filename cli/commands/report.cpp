// `mnemo report --db FILE --out DIR`: report.md + report.html + figures from the results database.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "engine/tools/report_catalog.h"
#include "reports/report.h"

namespace mnemo::cli {

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report", "Write report.md, report.html and PNG/SVG figures (gnuplot) from the results database");
  auto db_path = std::make_shared<std::string>(kDefaultDbPath);
  auto out_dir = std::make_shared<std::string>(kDefaultReportDir);
  cmd->add_option("--db", *db_path, "Results database (SQLite)")->capture_default_str();
  cmd->add_option("--out", *out_dir, "Output directory")->capture_default_str();
  cmd->callback([db_path, out_dir] {
    namespace fs = std::filesystem;
    if (!fs::exists(*db_path))
      throw Error("results database " + *db_path +
                  " does not exist (pass --db FILE; `mnemo train`, `mnemo sweep` and `mnemo bench` "
                  "create it)");
    if (!fs::is_regular_file(*db_path)) throw Error("results database " + *db_path + " is not a file");
    // Read-only: works on a read-only file and refuses a SQLite file without mnemo's schema.
    ResultsDB db(*db_path, OpenMode::read_only);
    std::string md = write_report(db, *out_dir, report_catalog());
    std::cout << "wrote " << md << " and " << (fs::path(*out_dir) / "report.html").string()
              << " (figures in " << (fs::path(*out_dir) / "figures").string() << ")\n";
  });
}

}  // namespace mnemo::cli
