// Each `mnemo <command>` lives in its own file under cli/commands/ and adds itself to the app.
// Handlers throw mnemo::Error for bad input; main() prints it and exits non-zero.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo::cli {

void add_info_commands(CLI::App& app);  // --version handled in main; models, tasks
void add_generate_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_quickstart_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_check_kernel_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);  // tokenizer train | info | encode
void add_score_command(CLI::App& app);      // score predictions with a task's scorer
void add_run_command(CLI::App& app);        // run learnability (Atlas experiments)
void add_runs_command(CLI::App& app);       // list runs with their observed status
void add_export_commands(CLI::App& app);    // export (safetensors) | import-fla
void add_db_command(CLI::App& app);         // db merge (a sharded sweep's databases into one)
void add_data_command(CLI::App& app);       // data fetch recall (download the recall QA sets)
void add_hub_command(CLI::App& app);        // hub download (a Hugging Face model into the HF cache)
// (new commands: declare here, define in their own file, add to the list in cli/main.cpp)
// Each command's example lines (command path, e.g. "tokenizer info"; "" for `mnemo` itself) and their footers.
const std::vector<std::pair<std::string, std::vector<std::string>>>& command_examples();
void add_command_examples(CLI::App& app);  // after every command is added

// `--name value` pairs left over by CLI11 (allow_extras) -> {"name": value} with '-' -> '_',
// values parsed as JSON where possible ("128" -> 128, "true" -> true), else kept as strings.
json extras_to_params(const std::vector<std::string>& extras);
// "key=value" strings from --set -> JSON object (same value parsing).
json set_pairs_to_json(const std::vector<std::string>& pairs);
json parse_scalar(const std::string& text);

}  // namespace mnemo::cli
