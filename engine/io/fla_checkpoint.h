// `mnemo import-fla`: an fla model folder (engine/io/fla_import.h) saved as a mnemo checkpoint folder, to train on
// from there (fine-tuning) or to keep beside mnemo's own runs.
#pragma once
#include <string>

#include "core/common.h"

namespace mnemo {

struct FlaImportResult {
  std::string family, checkpoint_dir;
  int64_t tensors = 0, parameters = 0;
  json config;  // the resolved mnemo run config written to the checkpoint
};
// Reads DIR/config.json and DIR's safetensors, writes out_dir/checkpoint (Error if out_dir already has one) and
// out_dir/imported_from.json. `task` and `overrides` (run-config keys: task parameters, training keys) complete the
// run config; overriding a key derived from the fla config is an Error.
FlaImportResult import_fla(const std::string& model_dir, const std::string& out_dir, const std::string& task,
                           const json& overrides);

}  // namespace mnemo
