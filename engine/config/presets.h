// Named model sizes and the papers' training recipes (docs/models.md#sizes-and-recipes), usable with every family:
// `size` sets d_model / n_layers / n_heads, `recipe` the optimiser, schedule, batch in tokens and
// context. Keys the user sets explicitly win over both.
#pragma once
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/model.h"

namespace mnemo {

struct SizePreset {
  std::string name;
  int64_t n_layers, d_model, n_heads;
  std::string source;  // e.g. "mnemo docs/models.md#sizes-and-recipes", "Titans/Miras/Atlas (docs/models.md#sizes-and-recipes)"
};
const std::vector<SizePreset>& size_presets();
const SizePreset& size_preset(const std::string& name);  // Error listing the known sizes

// The keys a size and a recipe set (size may be "" = none; recipe "" = none). `seq_len_known`: the task
// has a seq_len key (a recipe's context and batch in tokens apply to it). Error for an unknown
// recipe or a recipe without a per-size learning rate for that size (unless lr_given).
json preset_keys(const std::string& size, const std::string& recipe, bool seq_len_known, int64_t grad_accum,
                 bool lr_given = false);
std::vector<std::string> recipe_names();
std::string recipe_description(const std::string& recipe);

}  // namespace mnemo

namespace mnemo {
// Parameters of the model `cfg` describes, computed by building each distinct block once (no full
// model is allocated): embedding V·d (+ an untied head), blocks, final norm.
int64_t count_parameters(const ModelConfig& cfg);
}  // namespace mnemo
