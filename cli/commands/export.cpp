// `mnemo export --checkpoint DIR --format safetensors [--out PATH]`: PATH.safetensors + PATH.json (engine/io/export.h);
// `--format hf --out DIR`: a Hugging Face folder for flash-linear-attention (engine/io/fla_export.h).
// `mnemo import-fla --model-dir DIR --out RUN_DIR [--task T] [--set key=value]...`: an fla model saved by Hugging
// Face as a mnemo checkpoint (engine/io/fla_checkpoint.h); refused where mnemo would not compute the same function.
#include <iostream>
#include <memory>
#include <set>

#include "cli/commands/commands.h"
#include "runtime/registry.h"
#include "engine/io/export.h"
#include "engine/io/fla_export.h"
#include "engine/io/fla_checkpoint.h"
#include "engine/io/hub.h"

namespace mnemo::cli {

void add_export_commands(CLI::App& app) {
  struct ExportArgs {
    std::string checkpoint, format = "safetensors", out;
  };
  auto e = std::make_shared<ExportArgs>();
  auto* exp = app.add_subcommand(
      "export",
      "Write a model's weights: --format safetensors (PATH.safetensors + PATH.json, mnemo's names) or --format hf (a "
      "Hugging Face folder that flash-linear-attention loads with AutoModelForCausalLM.from_pretrained; the families "
      "fla has)");
  exp->add_option("--checkpoint", e->checkpoint,
                  "Run directory or its checkpoint/ folder, a Hugging Face model folder of an fla model, or "
                  "hf:OWNER/NAME[@REVISION] (downloaded into the Hugging Face cache)")
      ->required();
  exp->add_option("--format", e->format, "Output format: safetensors | hf")->capture_default_str();
  exp->add_option("--out", e->out,
                  "safetensors: output path without extension (default: DIR/export/model); hf: the folder to create "
                  "(default: DIR/export/hf)");
  exp->callback([e] {
    if (is_hub_model_spec(e->checkpoint)) e->checkpoint = hub_model_snapshot(e->checkpoint, &std::cerr);
    if (e->format == "hf") {
      const HfExportResult h = export_fla_folder(e->checkpoint, e->out);
      std::cout << json{{"folder", h.dir},          {"model_type", h.model_type}, {"tensors", h.tensors},
                        {"bytes", h.bytes},         {"tokenizer", h.tokenizer},   {"read_back_max_logit_diff", h.max_logit_diff}}
                       .dump()
                << "\n";
      return;
    }
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
  // The model types the registered families read (their FlaMixerNames), in the registry's order.
  std::string fla_types;
  std::set<std::string> listed;
  for (const auto& name : Registry::instance().mixer_names())
    for (const auto& names : Registry::instance().mixer(name).traits.fla)
      if (listed.insert(names.model_type).second) fla_types += (fla_types.empty() ? "" : ", ") + names.model_type;
  auto* imp = app.add_subcommand(
      "import-fla",
      "Import a flash-linear-attention model (Hugging Face config.json + model.safetensors) as a mnemo checkpoint "
      "(model types: " + fla_types + "; what mnemo's wiring does not compute exactly is refused, naming the field). "
      "`mnemo eval --checkpoint DIR` also reads such a folder directly");
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
