// `mnemo export --checkpoint DIR --format safetensors [--out PATH]`: PATH.safetensors + PATH.json (engine/io/export.h).
// `mnemo import-fla --model-dir DIR --out RUN_DIR [--task T] [--set key=value]...`: an fla model saved by Hugging
// Face as a mnemo checkpoint (engine/io/fla_import.h); refused where mnemo would not compute the same function.
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "engine/io/export.h"
#include "engine/io/fla_import.h"

namespace mnemo::cli {

void add_export_commands(CLI::App& app) {
  struct ExportArgs {
    std::string checkpoint, format = "safetensors", out;
  };
  auto e = std::make_shared<ExportArgs>();
  auto* exp = app.add_subcommand("export", "Write a checkpoint's weights as safetensors (PATH.safetensors + PATH.json)");
  exp->add_option("--checkpoint", e->checkpoint, "Run directory or its checkpoint/ folder")->required();
  exp->add_option("--format", e->format, "Output format (safetensors)")->capture_default_str();
  exp->add_option("--out", e->out, "Output path without extension (default: DIR/export/model)");
  exp->callback([e] {
    const ExportResult r = export_checkpoint(e->checkpoint, e->format, e->out);
    std::cout << json{{"safetensors", r.safetensors_path}, {"config", r.json_path}, {"tensors", r.tensors},
                      {"bytes", r.bytes}}.dump()
              << "\n";
  });

  struct ImportArgs {
    std::string model_dir, out, task = "mqar";
    std::vector<std::string> sets;
  };
  auto a = std::make_shared<ImportArgs>();
  auto* imp = app.add_subcommand(
      "import-fla",
      "Import a flash-linear-attention model (Hugging Face config.json + model.safetensors) as a mnemo checkpoint "
      "(transformer, gla, retnet, delta_net, gated_deltanet; refused where mnemo's wiring differs)");
  imp->add_option("--model-dir", a->model_dir, "Folder with config.json and model.safetensors")->required();
  imp->add_option("--out", a->out, "Run directory to create (its checkpoint/ is what `mnemo eval` loads)")->required();
  imp->add_option("--task", a->task, "Task recorded in the run config (`mnemo eval` defaults to it)")
      ->capture_default_str();
  imp->add_option("--set", a->sets, "key=value for the run config (task parameters, training keys)");
  imp->callback([a] {
    const FlaImportResult r = import_fla(a->model_dir, a->out, a->task, set_pairs_to_json(a->sets));
    std::cout << json{{"family", r.family}, {"checkpoint", r.checkpoint_dir}, {"tensors", r.tensors},
                      {"parameters", r.parameters}}.dump()
              << "\n";
  });
}

}  // namespace mnemo::cli
