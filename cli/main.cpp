// mnemo: evaluation-and-benchmarking harness for long-memory sequence models.
#include <CLI/CLI.hpp>

#include <cmath>
#include <functional>
#include <iostream>
#include <new>
#include <regex>

#include "cli/commands/commands.h"
#include "core/atomic_file.h"
#include "core/common.h"
#include "core/system_info.h"

namespace {

// Every app in the tree (the root, its subcommands, theirs), named ones only.
void for_each_command(CLI::App* app, const std::function<void(CLI::App*)>& f) {
  f(app);
  for (CLI::App* sub : app->get_subcommands([](CLI::App* s) { return !s->get_name().empty(); }))
    for_each_command(sub, f);
}

// Global options are accepted before and after the subcommand (`mnemo train --data-dir D ...`): each
// command gets its own copy. (CLI11's fallthrough() would send a subcommand's unknown options to the
// root, which breaks the commands that read task parameters from their extras, e.g. `generate`.)
bool g_debug = false;  // --debug: a library error's full text (LibTorch: with its C++ backtrace)

void add_global_options(CLI::App& app) {
  static std::string data_dir;
  for_each_command(&app, [](CLI::App* a) {
    a->add_option("--data-dir", data_dir, "Shared data directory (default: $MNEMO_DATA_DIR or ../shared/data)")
        ->each([](const std::string& d) { mnemo::set_data_dir(d); })
        ->group(a->get_parent() ? "Global options" : "Options");
    a->add_flag("--debug", g_debug, "On a library error, print its full text and backtrace (default: one line)")
        ->group(a->get_parent() ? "Global options" : "Options");
  });
}

// The first line of a library's message (its backtrace and context follow on later lines).
std::string first_line(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

// A check with a message a user can act on: "--jobs must be >= 1, got 0" (printed as "--jobs: must be ...",
// which format_parse_error joins).
CLI::Validator lower_bound_check(bool integer, bool strict) {
  const std::string bound = integer ? (strict ? ">= 1" : ">= 0") : (strict ? "> 0" : ">= 0");
  return CLI::Validator(
      [integer, strict, bound](std::string& input) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(input, v) || std::isnan(v) || (integer && v != std::floor(v)))
          return std::string("must be ") + (integer ? "an integer " : "a number ") + bound + ", got '" + input + "'";
        if (strict ? v <= 0 : v < 0) return "must be " + bound + ", got " + input;
        return std::string();
      },
      "");  // no description: the help keeps showing the stock check's (POSITIVE, NONNEGATIVE)
}

// CLI11's stock range checks (PositiveNumber, NonNegativeNumber) report "Value 0 not in range 0.000000 to
// 1797…368.000000": replace them, wherever a command uses them, by checks that say the bound.
void clarify_range_checks(CLI::App& app) {
  for_each_command(&app, [](CLI::App* a) {
    for (CLI::Option* opt : a->get_options()) {
      std::vector<bool> strict;  // one entry per stock check replaced
      for (int i = 0;; ++i) {
        CLI::Validator* v = nullptr;
        try {
          v = opt->get_validator(i);
        } catch (const CLI::OptionNotFound&) {
          break;
        }
        const std::string d = v->get_description();
        if (d != "POSITIVE" && d != "NONNEGATIVE") continue;
        v->active(false);
        strict.push_back(d == "POSITIVE");
      }
      const std::string type = opt->get_type_name();
      const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
      for (bool s : strict) opt->check(lower_bound_check(integer, s));
    }
  });
  // `train --stop-after N`: N >= 0 (0 = run to the end); -3 used to be accepted silently.
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "train"; }))
    if (CLI::Option* stop = sub->get_option_no_throw("--stop-after")) stop->check(lower_bound_check(true, false));
}

// The commands given on this command line, e.g. "tokenizer train".
std::string command_path(const CLI::App& app) {
  std::string path;
  const CLI::App* a = &app;
  while (true) {
    auto subs = a->get_subcommands();
    if (subs.empty()) break;
    a = subs.front();
    path += (path.empty() ? "" : " ") + a->get_name();
  }
  return path;
}

// The option `name` ("--n") of the deepest given command that has it.
const CLI::Option* find_option(const CLI::App& app, const std::string& name) {
  const CLI::Option* found = app.get_option_no_throw(name);
  const CLI::App* a = &app;
  while (true) {
    auto subs = a->get_subcommands();
    if (subs.empty()) break;
    a = subs.front();
    if (const CLI::Option* o = a->get_option_no_throw(name)) found = o;
  }
  return found;
}

// One line for a parse error: "--jobs must be >= 1, got 0 (see `mnemo sweep --help`)".
std::string format_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string msg = e.what();
  std::smatch m;
  if (std::regex_match(msg, m, std::regex(R"((-[^:\s]+): (must be .*))"))) {
    msg = m[1].str() + " " + m[2].str();
  } else if (std::regex_match(msg, m, std::regex(R"((-[^:\s]+): Value (.*) not in range (\S+) to (\S+))"))) {
    auto trim = [](std::string x) {  // "1.000000" -> "1"
      if (x.find('.') != std::string::npos) {
        x.erase(x.find_last_not_of('0') + 1);
        if (x.back() == '.') x.pop_back();
      }
      return x;
    };
    msg = m[1].str() + " must be in [" + trim(m[3].str()) + ", " + trim(m[4].str()) + "], got " + m[2].str();
  } else if (std::regex_match(msg, m, std::regex(R"(Could not convert: (\S+) = (.*))"))) {
    const CLI::Option* opt = find_option(app, m[1].str());
    const std::string type = opt ? opt->get_type_name() : "";
    std::string what = "a value of another type";
    if (type.rfind("INT", 0) == 0) what = "an integer";
    if (type.rfind("UINT", 0) == 0) what = "a non-negative integer";
    if (type.rfind("FLOAT", 0) == 0) what = "a number";
    msg = m[1].str() + " expects " + what + ", got '" + m[2].str() + "'";
  } else if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::string args;
    for (const auto& a : app.remaining(true)) args += (args.empty() ? "" : " ") + a;
    if (!args.empty()) msg = "unexpected argument(s): " + args;
  }
  const std::string cmd = command_path(app);
  return msg + " (see `mnemo " + (cmd.empty() ? "" : cmd + " ") + "--help`)";
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::configure_allocator();   // before the first tensor
  mnemo::configure_denormals();  // before the first parallel region
  CLI::App app{"mnemo: train, evaluate and compare long-memory sequence models"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print version, LibTorch, BLAS, threads and CUDA availability");

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
  add_runs_command(app);
  add_export_commands(app);
  add_db_command(app);
  add_data_command(app);
  add_hub_command(app);
  add_global_options(app);  // after the commands: every command gets them
  add_command_examples(app);  // an example at the end of every --help
  clarify_range_checks(app);

  try {
    mnemo::configure_threads();  // $MNEMO_THREADS=abc is an error, not 1 thread
    app.parse(argc, argv);
    if (show_version) {
      std::cout << mnemo::version_text();
    } else if (app.get_subcommands().empty()) {
      std::cout << app.help();
    }
    // The output went somewhere that took every byte (`mnemo score ... > /dev/full` is an error, not exit 0).
    mnemo::check_stdout();
  } catch (const CLI::Success& e) {  // --help (and friends): CLI11 prints it, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mnemo: error: " << format_parse_error(app, e) << "\n";
    return 1;
  } catch (const mnemo::Error& e) {
    std::cerr << "mnemo: error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "mnemo: error: LibTorch: " << (g_debug ? std::string(e.what()) : first_line(e.what_without_backtrace()))
              << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "mnemo: error: out of memory (an allocation failed); use smaller sizes\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mnemo: error: " << (g_debug ? std::string(e.what()) : first_line(e.what())) << "\n";
    return 1;
  }
  return 0;
}
