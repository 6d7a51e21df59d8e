// mnemo: evaluation-and-benchmarking harness for long-memory sequence models.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands/commands.h"
#include "core/common.h"
#include "core/system_info.h"

int main(int argc, char** argv) {
  mnemo::configure_allocator();  // before the first tensor
  CLI::App app{"mnemo: train, evaluate and compare long-memory sequence models"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  std::string data_dir;
  app.add_flag("--version", show_version, "Print version, LibTorch, BLAS, threads and CUDA availability");
  app.add_option("--data-dir", data_dir, "Shared data directory (default: $MNEMO_DATA_DIR or ../shared/data)")
      ->each([](const std::string& d) { mnemo::set_data_dir(d); });
  mnemo::configure_threads();

  // Each subcommand's callback runs its handler during parse (CLI11 final callbacks).
  using namespace mnemo::cli;
  add_info_commands(app);
  add_generate_command(app);
  add_train_command(app);
  add_eval_command(app);
  add_sweep_command(app);
  add_report_command(app);
  add_quickstart_command(app);
  add_bench_command(app);
  add_check_kernel_command(app);
  add_tokenizer_command(app);
  add_score_command(app);
  add_run_command(app);

  try {
    app.parse(argc, argv);
    if (show_version) {
      std::cout << mnemo::version_text();
    } else if (app.get_subcommands().empty()) {
      std::cout << app.help();
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mnemo::Error& e) {
    std::cerr << "mnemo: error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "mnemo: error (LibTorch): " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mnemo: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
