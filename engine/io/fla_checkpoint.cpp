#include "engine/io/fla_checkpoint.h"

#include <filesystem>

#include "core/atomic_file.h"
#include "engine/io/checkpoint.h"
#include "engine/io/fla_import.h"

namespace mnemo {
namespace fs = std::filesystem;

FlaImportResult import_fla(const std::string& model_dir, const std::string& out_dir, const std::string& task,
                           const json& overrides) {
  if (has_checkpoint(out_dir))
    throw Error("import-fla: " + out_dir + " already holds a mnemo checkpoint; choose a new --out");
  FlaLoadedModel loaded = [&] {
    try {
      return load_fla_model(model_dir, task, overrides);
    } catch (const Error& e) {
      throw Error("import-fla: " + std::string(e.what()));
    }
  }();
  save_checkpoint(out_dir, loaded.resolved, loaded.backbone, nullptr, TrainerState{});
  std::error_code ec;
  const fs::path abs = fs::absolute(model_dir, ec);
  write_file_atomic((fs::path(out_dir) / "imported_from.json").string(),
                    json{{"source", ec ? model_dir : abs.string()}, {"fla_model_type", loaded.fla.fla_model_type},
                         {"family", loaded.fla.family}, {"checked_against", kFlaCheckedCommit},
                         {"tensors", loaded.tensors}}
                            .dump(2) + "\n");
  FlaImportResult res;
  res.family = loaded.fla.family;
  res.checkpoint_dir = checkpoint_dir(out_dir);
  res.config = loaded.resolved;
  res.tensors = loaded.tensors;
  res.parameters = loaded.parameters;
  return res;
}

}  // namespace mnemo
