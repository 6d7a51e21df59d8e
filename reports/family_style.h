// One colour and one marker per model family, the same in every figure of the report.
// Families are sorted into the groups of the papers' comparisons; the marker encodes the group, the
// colour the family (distinct within a group, from a fixed qualitative palette). Each family's group and colour
// come from its registration (runtime/registry.h ReportStyle), handed to the report in its catalog's "families"
// (engine/tools/report_catalog.h); a family the catalog does not name gets a deterministic colour from a hash of its name.
#pragma once
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

struct FamilyStyle {
  std::string group;   // e.g. "linear recurrent"; "other" for a family the table does not know
  std::string colour;  // "#rrggbb"
  int point_type = 1;  // gnuplot point type (pngcairo/svg)
  bool known = false;  // listed in the table (false: fallback from the name's hash)
};

// The report's family table: [{"name", "group", "colour", "variants"}, ...] (colour: a palette name, "green";
// variants, optional: [{"arg", "label", "default"}, ...], the family's arguments that make a run a model of its own
// in the report, runtime/registry.h ReportVariant), in registration order; replaces the previous table. A group not
// among the built-in ones is added after them with a marker of its own. Error naming the family on a colour outside
// the palette or a malformed entry.
void set_family_styles(const json& families);

// The style of `family` (e.g. "gated_deltanet"), or of the family a model label names ("mamba3 (MIMO rank 4)"
// is drawn as mamba3). Never throws; an empty name is a fallback too.
FamilyStyle family_style(const std::string& family);

// The name a run goes by in the report: its model, then in parentheses its family's variants that the run's config
// sets away from their defaults and any `details` ("mamba3 (MIMO rank 4)", "gla (d=32, 1 layers)"). Two runs of one
// model that compute different functions so get rows, lines and bars of their own.
std::string run_label(const json& config, const std::string& model, const std::vector<std::string>& details = {});

// The model family a label names: the text before its first " (" or " @ " ("mamba3 (MIMO rank 4)" -> "mamba3",
// "gla @ step_1000.pt" -> "gla"); a plain model name is its own family.
std::string family_of_label(const std::string& label);

// The groups in display order ("attention", "linear recurrent", "deep test-time memory",
// "Atlas family", "MoM / Lattice", "hybrids", then any a registration added), then "other".
std::vector<std::string> family_groups();

// The families the table lists, group by group (registration order within a group).
std::vector<std::string> known_families();

// The fixed qualitative palette (12 colours, Tableau 10 + black + gold); series without a family are
// coloured from it by their order in the figure.
const std::vector<std::string>& style_palette();

}  // namespace mnemo
