// `mnemo export --format hf`: a mnemo language model as a Hugging Face folder that flash-linear-attention's own code
// loads (`import fla; AutoModelForCausalLM.from_pretrained(DIR)`): config.json with fla's model_type and fields,
// model.safetensors with fla's parameter names (metadata format "pt", as transformers expects), and the model's
// tokenizer file when it has one (tokenizer.json, or a SentencePiece tokenizer.model).
//
// The fla config is found from the model rather than written per family: for each fla model_type mnemo imports
// (engine/io/fla_import.h), the mnemo keys are written under fla's field names, and the candidate is accepted only
// if importing it gives back the same family and the same value of every key the import derives. The weights are
// the import's key map read backwards (a parameter fla does not have must hold the constant the import fills it
// with). Last, the written folder is read back with the importer and must give the model's logits; otherwise nothing
// is left under the final name.
#pragma once
#include <string>

#include "core/common.h"

namespace mnemo {

struct HfExportResult {
  std::string dir, model_type, tokenizer;  // tokenizer: the file copied ("" when the model has none to copy)
  int64_t tensors = 0, bytes = 0;
  double max_logit_diff = 0;               // the read-back check
};

// `model_path`: anything `mnemo eval --checkpoint` takes. `out_dir` must not exist; "" = RUN/export/hf for a run.
HfExportResult export_fla_folder(const std::string& model_path, const std::string& out_dir);

}  // namespace mnemo
